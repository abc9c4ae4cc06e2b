"""The one Markdown reading (appliance/ingest/markdown_blocks.py): blocks, fences, headings,
titles and front matter as the chunker, the title chooser and the data-image stripper see them."""
from __future__ import annotations

import time

import pytest

from appliance.ingest.markdown_blocks import LineIndex, code_lines, first_h1, parse, parse_blocks


def blocks(text: str) -> list[tuple]:
    return [(b.kind, b.first, b.last) + ((b.level, b.title) if b.kind == "heading" else ())
            for b in parse_blocks(LineIndex.of(text))]


def test_a_closed_fence_hides_headings_and_tables_inside_it() -> None:
    text = "# Top\n\n```python\n# a comment\n| a | b |\n|---|---|\n| 1 | 2 |\n```\n\n## Next\n"
    assert blocks(text) == [("heading", 0, 0, 1, "Top"), ("code", 2, 7), ("heading", 9, 9, 2, "Next")]


def test_tilde_fences_close_only_with_tildes_of_at_least_the_opening_length() -> None:
    text = "~~~~\n```\n~~~\n# still code\n~~~~~\nafter\n"
    assert blocks(text) == [("code", 0, 4), ("para", 5, 5)]
    assert code_lines(text) == [(0, 4)]


def test_a_fence_line_with_an_info_string_does_not_close_a_fence() -> None:
    text = "```\ncode\n```python\n# inside\n```\n# Out\n"
    assert blocks(text) == [("code", 0, 4), ("heading", 5, 5, 1, "Out")]
    assert first_h1(text) == "Out"


def test_an_unclosed_fence_is_text_and_what_follows_keeps_its_structure() -> None:
    text = "intro\n```\nstray fence\n\n# Heading\n\n| a | b |\n| - | - |\n| 1 | 2 |\n"
    assert blocks(text) == [("para", 0, 2), ("heading", 4, 4, 1, "Heading"), ("table", 6, 8)]
    assert code_lines(text) == [] and first_h1(text) == "Heading"


def test_many_unclosed_fences_cost_linear_time() -> None:
    parse.cache_clear()
    text = "```x\n" * 40_000
    started = time.perf_counter()
    assert blocks(text) == [("para", 0, 39_999)]
    assert time.perf_counter() - started < 10


def test_a_fence_inside_a_list_item_is_code_and_splits_the_item_around_it() -> None:
    text = "1. Install:\n\n   ```bash\n   # not a heading\n   pip install x\n   ```\n2. Run it\n"
    assert blocks(text) == [("para", 0, 0), ("code", 2, 5), ("para", 6, 6)]
    assert first_h1("- step\n  ```\n  # no title\n  ```\n") is None


def test_a_fence_in_a_block_quote_is_code_for_images_but_stays_quoted_text_for_the_chunker() -> None:
    text = "> ```\n> # quoted\n> ```\n"
    assert blocks(text) == [("para", 0, 2)] and code_lines(text) == [(0, 2)]


def test_setext_headings_are_headings_with_their_underline() -> None:
    text = "Main Title\n==========\n\nIntro text.\n\nA section\n---\n\nBody.\n"
    assert blocks(text) == [("heading", 0, 1, 1, "Main Title"), ("para", 3, 3),
                            ("heading", 5, 6, 2, "A section"), ("para", 8, 8)]
    assert first_h1(text) == "Main Title"


def test_a_paragraph_over_a_rule_or_a_formula_over_an_equals_sign_is_no_setext_heading() -> None:
    receipt = "SHOP NAME\n4567 Main Street\n(415) 555-0199\n=============\nItem 1 $10\n"
    assert blocks(receipt) == [("para", 0, 4)] and first_h1(receipt) is None
    assert blocks("member(X)\n=\nS\n") == [("para", 0, 2)]


def test_a_table_ends_at_the_first_line_without_a_pipe() -> None:
    text = "| a | b |\n|---|---|\n| 1 | 2 |\nNote: text after\n| c | d |\n| - | - |\n| 3 | 4 |\n"
    assert blocks(text) == [("table", 0, 2), ("para", 3, 3), ("table", 4, 6)]


def test_a_rule_after_a_blank_line_is_no_heading() -> None:
    assert blocks("text\n\n---\n\nmore\n") == [("para", 0, 0), ("para", 2, 2), ("para", 4, 4)]


def test_front_matter_is_text_never_a_heading_or_a_rule() -> None:
    text = "---\ntitle: A\ntags: [x]\n---\n# Real title\n\nBody\n"
    assert blocks(text) == [("para", 0, 3), ("heading", 4, 4, 1, "Real title"), ("para", 6, 6)]
    assert parse(text).front_matter == (0, 3)
    assert parse("text\n---\ntype: x\n---\n").front_matter is None


def test_headings_inside_lists_and_quotes_are_not_sections() -> None:
    assert blocks("- # item heading\n\n> # quoted\n") == [("para", 0, 0), ("para", 2, 2)]
    assert first_h1("> # quoted\n\n# Real\n") == "Real"


@pytest.mark.parametrize("line, title", [("# Title #", "Title"), ("#   spaced   out  ", "spaced   out"),
                                         ("# a#", "a#"), ("#", "")])
def test_atx_titles_drop_the_closing_sequence_and_outer_spaces(line: str, title: str) -> None:
    assert blocks(line + "\n") == [("heading", 0, 0, 1, title)]


def test_a_table_needs_a_data_row_and_lines_end_only_at_newlines() -> None:
    assert blocks("| a | b |\n|---|---|\n") == [("para", 0, 1)]
    text = "x\r# not a heading on its own line\n\n| a |\n|---|\n| 1 |\n"
    assert blocks(text) == [("para", 0, 0), ("table", 2, 4)]


def test_slide_markers_are_their_own_blocks() -> None:
    text = "<!-- Slide number: 1 -->\n# Hello\ntext\n\n<!-- Slide number: 2 -->\n"
    assert [(b.kind, b.number) for b in parse_blocks(LineIndex.of(text))] == [
        ("slide", 1), ("heading", 0), ("para", 0), ("slide", 2)]
