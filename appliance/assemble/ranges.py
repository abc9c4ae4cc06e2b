"""Part of a document rebuilt from its chunks: lines startLine-endLine, or pages (slides) pageStart-pageEnd.

read_file uses these so an agent reads the lines or pages around a grep or search hit
instead of the whole document. Lines are the source file's own (chunks of sources
with lines record the line each one starts on); pages come from the page (or slide)
range each chunk records, so a page range is answered with whole chunks: its text may
begin or end with part of a neighbouring page, and the reply names the pages it spans.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from appliance.chunks import StoredChunk
from appliance.errors import InvalidArgument

MAX_POSITION = 10**9


@dataclass(frozen=True)
class LineSpan:
    """The text of lines start_line..end_line (inclusive) and the source's last line."""

    content: str
    start_line: int
    end_line: int
    total_lines: int


@dataclass(frozen=True)
class PageSpan:
    """The text of the chunks on some pages (or slides), the pages that text spans, and the last page."""

    content: str
    page_unit: Literal["page", "slide"]
    page_start: int
    page_end: int
    total_pages: int


def check_range(names: tuple[str, str], start: int | None, end: int | None) -> None:
    """Both bounds (when given) are integers >= 1 and start <= end; InvalidArgument otherwise."""
    for name, value in zip(names, (start, end), strict=True):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= MAX_POSITION):
            raise InvalidArgument(f"{name} must be an integer from 1 to {MAX_POSITION} (1-based), not {value!r}")
    if start is not None and end is not None and start > end:
        raise InvalidArgument(f"{names[0]} ({start}) is after {names[1]} ({end})",
                              hint=f"Give {names[0]} <= {names[1]}; both are inclusive.")


def line_range(source: str, chunks: Sequence[StoredChunk], start: int | None, end: int | None) -> LineSpan:
    """The source's lines start..end (inclusive, clipped to its
    last line), rebuilt from the chunks (in chunk order) that cover them."""
    last = max((c.end_line or c.start_line for c in chunks if c.start_line is not None), default=None)
    if last is None:
        raise InvalidArgument(f"{source} has no line numbers: it was converted (PDF, Office, HTML, …), so its "
                              "Markdown lines are not the file's",
                              hint="Read it by pageStart/pageEnd when it has pages, else by offset.")
    start = start or 1
    end = min(end or last, last)
    if start > last:
        raise InvalidArgument(f"startLine {start} is past the last line of {source} ({last})")
    lines: dict[int, str] = {}
    glue = ""
    for chunk in chunks:
        first = chunk.start_line
        body = chunk.body
        if first is None or first > end or (chunk.end_line or first) < start:
            glue = " " if body[-1:].isspace() else ""
            continue
        for number, part in enumerate(body.rstrip().split("\n"), start=first):
            if start <= number <= end:  # a line cut between two chunks is joined back as it was cut
                lines[number] = lines[number] + glue + part if lines.get(number) else part
            glue = ""
        glue = " " if body[-1:].isspace() else ""
    content = "\n".join(lines.get(n, "") for n in range(start, end + 1))
    return LineSpan(content, start, end, last)


def page_range(source: str, chunks: Sequence[StoredChunk], start: int | None, end: int | None) -> PageSpan:
    """The text of the chunks on pages (or, for a
    presentation, slides) start..end, and the pages that text spans."""
    pages = [(c.page_start, c.page_end or c.page_start, c) for c in chunks if c.page_start is not None]
    unit: Literal["page", "slide"] = "page"
    if not pages:
        pages = [(c.slide, c.slide, c) for c in chunks if c.slide is not None]
        unit = "slide"
    if not pages:
        raise InvalidArgument(f"{source} has no pages or slides (only PDFs, scans and presentations do)",
                              hint="Read it by startLine/endLine when it has lines, else by offset.")
    total = max(b for _a, b, _r in pages)
    start = start or 1
    end = min(end or total, total)
    if start > total:
        raise InvalidArgument(f"pageStart {start} is past the last {unit} of {source} with text ({total})")
    chosen = [(a, b, r) for a, b, r in pages if a <= end and b >= start]
    content = "".join(c.body for _a, _b, c in chosen).strip()
    spans = (min(a for a, _b, _r in chosen), max(b for _a, b, _r in chosen)) if chosen else (start, end)
    return PageSpan(content, unit, spans[0], spans[1], total)
