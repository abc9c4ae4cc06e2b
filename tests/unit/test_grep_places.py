"""grep's places and read_file's line ranges on documents cut by the real chunker (no index, no model)."""
from __future__ import annotations

import re

import pytest

from appliance.assemble.ranges import line_range, page_range
from appliance.chunks import StoredChunk
from appliance.errors import InvalidArgument
from appliance.ingest.chunk import chunk_document
from appliance.search.grep import GrepDoc, grep, path_glob
from tests.fixtures.chunks import stored_chunk


def words(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text))


def rows_of(markdown: str, *, lines: bool, budget: int = 32) -> list[StoredChunk]:
    return [stored_chunk(source_id="/docs/x", source_kind="file", path="x", title="", chunk_index=c.index,
                         text=c.text, body_start=c.body_start, heading=c.heading,
                         start_line=c.start_line if lines else None, end_line=c.end_line if lines else None,
                         page_start=c.page_start, page_end=c.page_end, slide=c.slide, sheet=c.sheet)
            for c in chunk_document(markdown, count_tokens=words, budget=budget)]


LONG = " ".join(f"w{n}" for n in range(80)) + " tail_WORD"
DOC = ("# Manual\n\n## Setup\n\n"
       + "\n".join(f"Step {n}: tighten bolt B{n} to {n} Nm and check it twice." for n in range(1, 40))
       + "\n\n\n## Table\n\n| part | code |\n| --- | --- |\n" + "\n".join(f"| p{n} | C{n:03d} |" for n in range(30))
       + "\n\n    indented code line\n\n" + LONG + "\n")
"""A manual whose long last line is cut over several chunks (budget 32)."""


def test_every_match_has_the_line_it_is_on_in_the_source() -> None:
    rows = rows_of(DOC, lines=True)
    assert len(rows) > 10 and sum(1 for r in rows if r.start_line == len(DOC.split("\n")) - 1) >= 2
    source = DOC.split("\n")
    out = grep([GrepDoc.from_chunks(rows)], r"\S+", is_regex=True, max_results=500)
    assert len(out.matches) == sum(1 for line in source if line.strip())
    for m in out.matches:
        assert m.line_number is not None and m.line.strip() in source[m.line_number - 1], m
    tail = grep([GrepDoc.from_chunks(rows)], "tail_WORD").matches
    assert [m.line_number for m in tail] == [source.index(LONG) + 1] and tail[0].chunk_index == len(rows) - 1


def test_a_line_range_gives_the_source_lines_back() -> None:
    rows = rows_of(DOC, lines=True)
    source = DOC.rstrip("\n").split("\n")
    whole = line_range("x", rows, None, None)
    assert whole.total_lines == len(source)
    assert [ln.strip() for ln in whole.content.split("\n")] == [ln.strip() for ln in source]
    part = line_range("x", rows, 10, 12)
    assert part.content.split("\n") == source[9:12] and (part.start_line, part.end_line) == (10, 12)
    with pytest.raises(InvalidArgument):
        line_range("x", rows_of(DOC, lines=False), 1, 2)
    with pytest.raises(InvalidArgument):
        page_range("x", rows, 1, 2)


def test_pages_come_from_the_page_markers() -> None:
    pages = "\n\n".join(f"<!-- Page number: {n} -->\n" + " ".join(["word"] * 40) + f" PAGE_MARK_{n}" for n in (1, 2, 3))
    rows = rows_of(pages, lines=False)
    doc = GrepDoc.from_chunks(rows)
    for n in (1, 2, 3):
        (m,) = grep([doc], f"PAGE_MARK_{n}").matches
        assert (m.page_start, m.page_end, m.line_number) == (n, n, None)
    two = page_range("x", rows, 2, 2)
    assert "PAGE_MARK_2" in two.content and "PAGE_MARK_1" not in two.content and two.total_pages == 3


def test_markup_is_searched_as_a_person_reads_it() -> None:
    rows = rows_of("The gasket memo GASKET\\_MEMO\\_4410 is **very** important\n\nPlain a\\*b\n", lines=False)
    doc = GrepDoc.from_chunks(rows)
    (m,) = grep([doc], "GASKET_MEMO_4410").matches
    assert m.line == "The gasket memo GASKET_MEMO_4410 is very important"
    assert len(grep([doc], "memo gasket_memo_4410 is very").matches) == 1
    assert len(grep([doc], "a*b").matches) == 1
    assert len(grep([doc], "GASKET\\_MEMO").matches) == 1  # the stored Markdown still matches too


def test_file_globs_follow_gitignore_rules() -> None:
    assert path_glob("*.pdf")("a/b/c.pdf") and not path_glob("*.pdf")("a/b/c.md")
    deep = path_glob("reports/**/*.md")
    assert deep("reports/x.md") and deep("reports/a/b/x.md") and not deep("other/reports/x.md")
    assert path_glob("reports/")("reports/a/x.pdf")
    for bad in ("", "!*.md", "a\x00b"):
        with pytest.raises(InvalidArgument):
            path_glob(bad)


def test_a_runaway_regex_is_stopped_per_line_and_the_scan_says_so() -> None:
    import time

    rows = [stored_chunk(source_id="/docs/evil.txt", source_kind="file", path="evil.txt", title="", chunk_index=0,
                         text="a" * 60 + "!\nERR\\_ONE here\n", body_start=0, start_line=1)]
    docs = [GrepDoc.from_chunks(rows)]
    started = time.monotonic()
    out = grep(docs, "(a|aa)+$", is_regex=True, deadline_s=5.0)  # exponential backtracking
    assert time.monotonic() - started < 4 and out.stopped == "regex_timeout"
    found = grep(docs, r"ERR_\w+", is_regex=True)
    assert [(m.line_number, m.line) for m in found.matches] == [(2, "ERR_ONE here")] and found.stopped is None
    assert found.documents_searched == found.files_searched == 1


def test_a_reply_of_long_matching_lines_stays_within_the_reply_budget() -> None:
    from appliance.assemble.paging import REPLY_BUDGET_CHARS, json_chars

    line = "needle " + "x" * 900
    markdown = "\n\n".join(line for _ in range(400))
    out = grep([GrepDoc.from_chunks(rows_of(markdown, lines=True, budget=2000))], "needle", max_results=500)
    assert 50 < len(out.matches) < 400 and out.truncated  # cut by characters, not by maxResults
    assert json_chars(out.results(documents_indexed=1)) <= REPLY_BUDGET_CHARS
