"""Rules of the structure-first chunker, one test per rule, with a word/punctuation counter."""
from __future__ import annotations

import re
import time

import pytest

from appliance.ingest.chunk import (
    CODE_SPLIT_MARKER,
    SCHEME_VERSION,
    SECTION_CHAR_CAP,
    audit,
    chunk_document,
    collapse_whitespace,
    reconstruct,
    section_text,
)
from appliance.ingest.markdown_blocks import timestamp_seconds


def count(text: str) -> int:
    """One token per word and per punctuation mark: deterministic and cheap."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def chunk(md: str, budget: int = 60, **kw):
    chunks = chunk_document(md, count_tokens=count, budget=budget, **kw)
    assert audit(md, chunks, count_tokens=count, budget=budget) == []
    return chunks


def context(c) -> str:
    return c.text[:c.body_start]


def sections(chunks):
    out: dict[int, list] = {}
    for c in chunks:
        out.setdefault(c.section, []).append(c)
    return out


def words(n: int, word: str = "word") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


# --- basics ------------------------------------------------------------------------


def test_scheme_version_and_cap_are_published() -> None:
    assert SCHEME_VERSION.startswith("structure-")
    assert SECTION_CHAR_CAP == 4000


@pytest.mark.parametrize("md", ["", "   ", "\n\n\t \n"])
def test_empty_documents_give_no_chunks(md: str) -> None:
    assert chunk_document(md, count_tokens=count, budget=60) == []
    assert reconstruct([]) == ""
    assert section_text([]) == ""


def test_budget_below_minimum_is_refused() -> None:
    with pytest.raises(ValueError):
        chunk_document("text", count_tokens=count, budget=4)


def test_generic_document_packs_paragraphs_and_reconstructs() -> None:
    md = "\n\n".join(f"Paragraph {i}. " + words(15) for i in range(12))
    chunks = chunk(md, budget=60)
    assert len(chunks) > 1
    assert all(count(c.text) <= 60 for c in chunks)
    assert all(c.heading == "" and c.body_start == 0 for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert collapse_whitespace(reconstruct(chunks)) == collapse_whitespace(md)
    # paragraphs are kept together when they fit: a chunk starts at a paragraph start
    assert all(c.body.startswith("Paragraph") for c in chunks)


def test_line_numbers_point_at_the_body() -> None:
    md = "first line\n\nsecond paragraph\nstill second\n\n\nthird " + words(80)
    chunks = chunk(md, budget=30)
    lines = md.split("\n")
    for c in chunks:
        first = c.body.strip().split("\n")[0]
        assert first[:10] in lines[c.start_line - 1]
        last = c.body.strip().split("\n")[-1]
        assert last[-10:] in lines[c.end_line - 1]


# --- headings ------------------------------------------------------------------------


SPEC = """# Guide

Intro text for the guide.

## Install

Run the installer.

### Linux

Use the package.

## Empty leaf

## Parent without body
### Child
Child text.
"""


def test_heading_sections_carry_breadcrumbs() -> None:
    chunks = chunk(SPEC)
    labels = [c.heading for c in chunks]
    assert labels == ["Guide", "Guide > Install", "Guide > Install > Linux",
                      "Guide > Empty leaf", "Guide > Parent without body > Child"]
    for c in chunks:
        assert context(c) == c.heading + "\n"
    assert len(sections(chunks)) == len(chunks)


def test_heading_without_body_or_child_is_its_own_chunk() -> None:
    chunks = chunk(SPEC)
    leaf = [c for c in chunks if c.heading.endswith("Empty leaf")]
    assert [c.body.strip() for c in leaf] == ["## Empty leaf"]


def test_empty_parent_heading_rides_with_its_child() -> None:
    chunks = chunk(SPEC)
    child = next(c for c in chunks if c.heading.endswith("Child"))
    assert child.body.strip().startswith("## Parent without body\n### Child")
    assert not any(c.heading.endswith("Parent without body") for c in chunks)


def test_one_heading_is_not_a_heading_document() -> None:
    chunks = chunk("# Only\n\ntext one\n\ntext two")
    assert all(c.heading == "" for c in chunks)


def test_breadcrumb_is_elided_from_the_middle() -> None:
    names = ["Alpha general provisions of the agreement", "Beta scope and extent of work",
             "Gamma detailed obligations list", "Delta approval procedure steps"]
    md = "\n\n".join(f"{'#' * (i + 1)} {n}" for i, n in enumerate(names)) + "\n\n" + words(40)
    budget = 40
    chunks = chunk(md, budget=budget)
    last = chunks[-1]
    crumb = context(last).split("\n")[0]
    assert crumb.startswith("Alpha general") and crumb.endswith("Delta approval procedure steps")
    assert " > … > " in crumb
    assert count(crumb) <= budget // 3
    assert last.heading == " > ".join(names)  # the label itself stays whole


def test_breadcrumb_of_one_huge_heading_is_shortened() -> None:
    md = "# " + words(60) + "\n\ntext\n\n# second\n\nmore"
    chunks = chunk(md, budget=30)
    assert all(count(context(c)) <= 10 + 1 for c in chunks)
    assert collapse_whitespace(reconstruct(chunks)) == collapse_whitespace(md)


def test_hash_lines_inside_code_are_not_headings() -> None:
    md = "# Real\n\n```sh\n# comment\n## another\n```\n\ntext"
    chunks = chunk(md)
    assert {c.heading for c in chunks} == {""}


# --- tables --------------------------------------------------------------------------


def table(rows: int, width: int = 3) -> str:
    head = "| " + " | ".join(f"Col{i}" for i in range(width)) + " |"
    sep = "| " + " | ".join("---" for _ in range(width)) + " |"
    body = ["| " + " | ".join(f"r{r}c{i} value" for i in range(width)) + " |" for r in range(rows)]
    return "\n".join([head, sep, *body])


def test_table_rows_stay_whole_and_repeat_the_header() -> None:
    md = "# T\n\nintro\n\n## Data\n\n" + table(40)
    chunks = chunk(md, budget=60)
    data = [c for c in chunks if "r" in c.body and "value" in c.body]
    assert len(data) > 3
    for c in data:
        assert "| Col0 | Col1 | Col2 |" in c.text.split("| r")[0]
    first, rest = data[0], data[1:]
    assert "| Col0" in first.body  # the header itself is the document's content once
    for c in rest:
        assert context(c).endswith("| Col0 | Col1 | Col2 |\n| --- | --- | --- |\n")
        assert "Col0" not in c.body
    for r in range(40):
        row = f"| r{r}c0 value | r{r}c1 value | r{r}c2 value |"
        assert sum(row in c.body for c in chunks) == 1
    assert reconstruct(chunks).count("| Col0") == 1


def test_header_row_without_data_rows_is_ordinary_content() -> None:
    md = "before\n\n| Only | Header |\n| --- | --- |\n\n" + "\n\n".join(words(20) for _ in range(6))
    chunks = chunk(md, budget=30)
    assert sum("| Only | Header |" in c.text for c in chunks) == 1


def test_row_over_the_budget_is_split_at_whitespace_with_header() -> None:
    long_row = "| key | " + words(90, "w") + " |"
    md = "| K | V |\n| --- | --- |\n| a | b |\n" + long_row + "\n| c | d |"
    chunks = chunk(md, budget=40)
    assert all(count(c.text) <= 40 for c in chunks)
    holders = [c for c in chunks if "w1" in c.body or "w50" in c.body or "w89" in c.body]
    assert len(holders) >= 2
    for c in chunks:
        assert "| K | V |" in c.text
        assert not re.search(r"w\d*$", c.body.rstrip()) or c.body.rstrip()[-1].isdigit()
    assert collapse_whitespace(reconstruct(chunks)) == collapse_whitespace(md)


def test_word_over_the_budget_is_split_by_characters() -> None:
    word = "ж" * 50 + "漢" * 50 + "🙂" * 30
    md = f"start {word} end"

    def by_char(text: str) -> int:
        return len(re.sub(r"\s", "", text))

    chunks = chunk_document(md, count_tokens=by_char, budget=40)
    assert audit(md, chunks, count_tokens=by_char, budget=40) == []
    assert all(by_char(c.text) <= 40 for c in chunks)
    assert reconstruct(chunks) == md  # character cuts join back without added spaces


def test_emoji_sequences_are_not_cut_apart() -> None:
    family = "👩\u200d👩\u200d👧\u200d👦"

    def by_char(text: str) -> int:
        return len(re.sub(r"\s", "", text))

    md = family * 30
    chunks = chunk_document(md, count_tokens=by_char, budget=20)
    for c in chunks:
        assert not c.body.startswith("\u200d") and not c.body.rstrip().endswith("\u200d")
    assert reconstruct(chunks) == md


# --- code ----------------------------------------------------------------------------


def code(lines: int) -> str:
    return "```python\n" + "\n".join(f"value_{i} = compute({i})" for i in range(lines)) + "\n```"


def test_small_code_block_is_atomic_even_over_the_budget() -> None:
    block = code(12)  # about 90 tokens
    md = "intro\n\n" + block + "\n\noutro"
    chunks = chunk(md, budget=40)
    holder = [c for c in chunks if "value_0" in c.body]
    assert len(holder) == 1 and block in holder[0].body
    assert 40 < count(holder[0].text) <= 160
    assert CODE_SPLIT_MARKER not in "".join(c.text for c in chunks)


def test_code_block_over_four_budgets_is_split_with_marker() -> None:
    block = code(60)
    md = "# A\n\ntext\n\n# B\n\n" + block + "\n\nafter"
    chunks = chunk(md, budget=40)
    pieces = [c for c in chunks if "value_" in c.body]
    assert len(pieces) > 4
    for c in pieces:
        assert CODE_SPLIT_MARKER in context(c)
        assert count(c.text) <= 40
    for i in range(60):
        assert sum(f"value_{i} = compute({i})" in c.body for c in chunks) == 1
    assert CODE_SPLIT_MARKER not in reconstruct(chunks)


def test_unclosed_fence_is_not_atomic() -> None:
    md = "text\n\n```\n" + "\n".join(f"line {i} of stray text" for i in range(40))
    chunks = chunk(md, budget=30)
    assert len(chunks) > 3
    assert all(count(c.text) <= 30 for c in chunks)
    assert CODE_SPLIT_MARKER not in "".join(c.text for c in chunks)


def test_unclosed_fence_does_not_hide_later_headings() -> None:
    md = "```\nstray\n\n# One\n\ntext\n\n# Two\n\nmore"
    chunks = chunk(md)
    assert {c.heading for c in chunks} >= {"One", "Two"}


# --- slides --------------------------------------------------------------------------


def test_one_section_per_slide() -> None:
    slides = [f"<!-- Slide number: {n} -->\n# Slide title {n}\n" + words(5 + 30 * (n == 2))
              for n in range(1, 5)]
    md = "\n\n".join(slides)
    chunks = chunk(md, budget=30)
    by_section = sections(chunks)
    assert len(by_section) == 4
    assert [v[0].heading for v in by_section.values()] == [f"Slide {n}" for n in range(1, 5)]
    assert len(by_section[1]) > 1  # slide 2 is over the budget, so it is split
    assert section_text(by_section[1]).startswith("Slide 2\n<!-- Slide number: 2 -->")


# --- transcripts ---------------------------------------------------------------------


def teams_transcript(turns: int, step: int = 25) -> str:
    out = ["**Transcript**", "", "March 3, 2025, 10:02AM", ""]
    for i in range(turns):
        t = i * step
        out += [f"**Speaker {i % 3}** {t // 60}:{t % 60:02d}", f"Turn {i} says " + words(8), ""]
    return "\n".join(out)


def inline_transcript(turns: int, step: int = 25) -> str:
    return "\n".join(f"[{(i * step) // 60:02d}:{(i * step) % 60:02d}] Anna: turn {i} " + words(6)
                     for i in range(turns))


def vtt_transcript(turns: int, step: int = 25) -> str:
    out = ["WEBVTT", ""]
    for i in range(turns):
        t = i * step
        out += [f"00:{t // 60:02d}:{t % 60:02d}.000 --> 00:{t // 60:02d}:{t % 60 + 3:02d}.000",
                f"cue {i} " + words(6), ""]
    return "\n".join(out)


@pytest.mark.parametrize("make", [teams_transcript, inline_transcript, vtt_transcript])
def test_transcripts_get_two_minute_windows(make) -> None:  # type: ignore[no-untyped-def]
    md = make(20)  # 20 turns, 25 s apart: 0..475 s, four windows
    chunks = chunk(md, budget=60, title="Weekly sync")
    labels = []
    for v in sections(chunks).values():
        if v[0].heading.startswith("["):
            labels.append(v[0].heading)
    assert labels == ["[00:00–02:00] Weekly sync", "[02:00–04:00] Weekly sync",
                      "[04:00–06:00] Weekly sync", "[06:00–08:00] Weekly sync"]
    for c in chunks:
        if c.heading.startswith("["):
            assert context(c) == c.heading + "\n"
    # whole turns are packed: no turn is cut when it fits
    for i in range(20):
        assert sum(f" {i} " in c.body for c in chunks) == 1


def test_transcript_without_title_is_labelled_by_time() -> None:
    chunks = chunk(inline_transcript(6))
    assert chunks[0].heading == "[00:00–02:00]"


@pytest.mark.parametrize("line,seconds", [
    ("00:01:02 Speaker: text", 62), ("[12:30] text", 750), ("Name 1:02:03", 3723),
    ("**Ann Lee** 0:08", 8), ("00:00:01,000 --> 00:00:04,000", 1), ("- (03:05) hello", 185),
    ("Plain text 12:30 in the middle of a line", None), ("12:75 odd", None), ("Total 3", None),
    ("From nobody Mon Aug 25 13:47:30 2014", None),
])
def test_timestamp_lines(line: str, seconds: int | None) -> None:
    assert timestamp_seconds(line) == seconds


def test_a_few_times_in_prose_do_not_make_a_transcript() -> None:
    md = "# Agenda\n\n" + "\n".join(
        [f"Item {i}: " + words(12) for i in range(20)] + ["10:30 coffee", "12:00 lunch"]) + \
        "\n\n# Notes\n\ntext"
    chunks = chunk(md)
    assert {c.heading for c in chunks} == {"Agenda", "Notes"}


def test_timestamps_going_backwards_are_not_a_transcript() -> None:
    md = "\n".join(f"[{m:02d}:00] entry {m}" for m in (30, 5, 50, 1, 40, 2, 33, 7))
    chunks = chunk(md)
    assert all(not c.heading.startswith("[") for c in chunks)


# --- sections ------------------------------------------------------------------------


def test_long_section_is_cut_at_paragraphs() -> None:
    md = "# A\n\n" + "\n\n".join(f"Para {i}. " + words(60) for i in range(30)) + "\n\n# B\n\nend"
    chunks = chunk(md, budget=100)
    by_section = sections(chunks)
    a_sections = [v for v in by_section.values() if v[0].heading == "A"]
    assert len(a_sections) > 2
    for v in a_sections:
        text = collapse_whitespace("".join(c.body for c in v))
        assert len(text) <= SECTION_CHAR_CAP
        assert text.startswith(("# A", "Para"))
        assert section_text(v).startswith("A\n")


def test_long_table_section_is_cut_at_rows_with_header() -> None:
    md = "# Sheet\n\n" + table(300) + "\n\n# Other\n\nx"
    chunks = chunk(md, budget=80)
    tab = [v for v in sections(chunks).values() if v[0].heading == "Sheet"]
    assert len(tab) > 2
    for v in tab:
        text = section_text(v)
        assert "| Col0 | Col1 | Col2 |" in text
        assert len("".join(c.body for c in v).strip()) <= SECTION_CHAR_CAP


def test_one_long_paragraph_is_cut_at_sentences() -> None:
    md = " ".join(f"Sentence number {i} " + words(10) + "." for i in range(120))
    chunks = chunk(md, budget=100)
    secs = list(sections(chunks).values())
    assert len(secs) > 2
    for v in secs:
        body = "".join(c.body for c in v).strip()
        assert len(body) <= SECTION_CHAR_CAP and body.endswith(".")


def test_single_sentence_over_the_cap_stays_one_section() -> None:
    md = "Short one. " + words(900) + ". Tail sentence."
    chunks = chunk(md, budget=100)
    big = [v for v in sections(chunks).values() if "word500" in "".join(c.body for c in v)]
    assert len(big) == 1
    assert len("".join(c.body for c in big[0])) > SECTION_CHAR_CAP


def test_section_text_has_label_once_and_no_repeated_header() -> None:
    md = "# Sheet\n\nintro\n\n" + table(30) + "\n\n# Next\n\ntext"
    chunks = chunk(md, budget=50)
    sheet = [c for c in chunks if c.heading == "Sheet"]
    text = section_text(sheet)
    assert text.count("Sheet") == 2  # the label line and the "# Sheet" heading itself
    assert text.count("| Col0") == 1
    assert collapse_whitespace(text) == collapse_whitespace(
        "Sheet\n" + md.split("# Next")[0])


def test_reconstruct_leaves_out_repeated_context() -> None:
    md = "# A\n\n## B\n\n" + table(50) + "\n\n## C\n\n" + words(300)
    chunks = chunk(md, budget=40)
    rebuilt = reconstruct(chunks)
    assert collapse_whitespace(rebuilt) == collapse_whitespace(md)
    assert rebuilt.count("| Col0") == 1
    assert "A > B" not in rebuilt


# --- cost ----------------------------------------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.calls = 0
        self.chars = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        self.chars += len(text)
        return text.count(" ") + 1


@pytest.mark.parametrize("size", [200_000, 2_000_000])
def test_one_long_line_costs_linear_counting(size: int) -> None:
    line = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    tally = Tally()
    start = time.perf_counter()
    chunks = chunk_document(line, count_tokens=tally, budget=110)
    elapsed = time.perf_counter() - start
    assert all(tally(c.text) <= 110 for c in chunks)
    assert tally.chars <= 8 * size  # each character is counted a bounded number of times
    assert elapsed < 5 + size / 100_000
    assert collapse_whitespace(reconstruct(chunks)) == collapse_whitespace(line)


@pytest.mark.slow
def test_fifty_megabytes_of_one_line() -> None:
    line = "x" * 10 + ("tokens and more tokens " * (50_000_000 // 23))
    tally = Tally()
    start = time.perf_counter()
    chunks = chunk_document(line, count_tokens=tally, budget=110)
    assert time.perf_counter() - start < 120
    assert tally.chars <= 8 * len(line)
    assert len(chunks) > 10_000


def test_heading_shares_a_chunk_with_the_start_of_a_long_paragraph() -> None:
    md = "# One\n\nshort\n\n# Two\n\n" + words(200)
    chunks = chunk(md, budget=50)
    two = [c for c in chunks if c.heading == "Two"]
    assert two[0].body.startswith("# Two\n\nword0")
    assert all(count(c.text) <= 50 for c in two)


def test_a_long_turn_is_cut_but_stays_in_its_window() -> None:
    md = "\n".join([f"[00:{10 * i:02d}] Bob: turn {i} " + words(8) for i in range(4)]
                   + ["[01:30] Eve: " + words(150), "[02:10] Bob: next window"])
    chunks = chunk(md, budget=40, title="Call")
    first_window = [c for c in chunks if c.heading == "[00:00–02:00] Call"]
    assert sum("Eve:" in c.body for c in first_window) == 1
    assert any("word149" in c.body for c in first_window)
    assert chunks[-1].heading == "[02:00–04:00] Call"
    assert all(count(c.text) <= 40 for c in chunks)


def test_windows_line_endings_keep_the_structure() -> None:
    md = ("# A\n\nintro\n\n## B\n\n" + table(40)).replace("\n", "\r\n")
    chunks = chunk(md, budget=50)
    assert {c.heading for c in chunks} == {"A", "A > B"}
    assert sum("| Col0 | Col1 | Col2 |" in context(c) for c in chunks) > 2


def test_whole_code_block_never_exceeds_the_ceiling() -> None:
    code = "```python\n" + "\n".join(f"value_{i} = compute({i}, {i + 1})" for i in range(120)) + "\n```\n"
    loose = chunk_document(code, count_tokens=count, budget=300)
    assert len(loose) == 1 and count(loose[0].text) > 500
    capped = chunk_document(code, count_tokens=count, budget=300, ceiling=500)
    assert len(capped) > 1 and all(count(c.text) <= 500 for c in capped)
    assert " ".join(reconstruct(capped).split()) == " ".join(code.split())


# -- where a chunk comes from: page and sheet markers ------------------------------------------
def test_page_markers_become_page_ranges_and_leave_the_text() -> None:
    from appliance.ingest.chunk_places import blank_markers

    md = ("<!-- Page number: 1 -->\n\nfirst page words here.\n\n<!-- Page number: 2 -->\n\n"
          "second page words.\n\n<!-- Page number: 3 -->\n\n<!-- Page number: 4 -->\n\nfourth page.")
    chunks = chunk(md, 16)  # pages of 5 tokens share chunks; a chunk of 8+ tokens ends at a page break
    assert [(c.page_start, c.page_end) for c in chunks] == [(1, 2), (4, 4)]
    assert not any("<!--" in c.text for c in chunks)
    blanked, _ = blank_markers(md)
    assert blanked.count("\n") == md.count("\n")  # lines keep their numbers
    assert all(c.start_line is not None for c in chunks) and chunks[1].start_line == 13


def test_sheet_markers_name_the_sheet_and_slides_their_number() -> None:
    md = ("<!-- Sheet name: Budget -->\n## Budget\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n"
          "<!-- Sheet name: Staff -->\n## Staff\n| n | m |\n| --- | --- |\n| x | y |\n")
    chunks = chunk(md, 64)
    assert {(c.heading, c.sheet) for c in chunks} == {("Budget", "Budget"), ("Staff", "Staff")}
    assert not any("Sheet name" in c.text for c in chunks)
    deck = "<!-- Slide number: 1 -->\n# One\ntext\n\n<!-- Slide number: 2 -->\n# Two\nmore text\n"
    assert [(c.slide, c.page_start, c.sheet) for c in chunk(deck, 64)] == [(1, None, None), (2, None, None)]


def test_text_without_markers_has_no_location() -> None:
    chunks = chunk("# Title\n\nplain words\n\n## Next\n\nmore <!-- a comment --> words\n", 64)
    assert all(c.page_start is None and c.sheet is None and c.slide is None for c in chunks)
