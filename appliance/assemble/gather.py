"""A search answer as one Markdown block an agent can paste: numbered hits, citations, surrounding lines.

The hits are the JSON answer's, in its order (the same ranking code); only the
rendering differs. Every name in it (path, place, heading, title, the query) is a code
span (appliance.assemble.quoting.md_code), every passage a fence: neither can start a line of its
own. For a hit in a text file, `context_lines` lines of the file around the passage come
with it (read from disk, so they are the file as it is now); other sources give the
passage alone. The block stays within the same character budget as the JSON reply.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from appliance.assemble.citations import hit_place, place
from appliance.assemble.paging import REPLY_BUDGET_CHARS
from appliance.assemble.quoting import backtick_run, md_code
from appliance.results import RankedHit, SearchResults

MAX_CONTEXT_LINES = 20

ReadLines = Callable[[str], Sequence[str] | None]
"""A file path -> its lines (None when it cannot be read as text)."""


def _fence(text: str) -> str:
    """A code fence longer than any backtick run inside `text`."""
    return "`" * max(3, backtick_run(text) + 1)


def _excerpt(hit: RankedHit, context_lines: int, read_lines: ReadLines) -> str:
    start, end = hit.start_line, hit.end_line
    if context_lines and hit.file_path and start and end:
        lines = read_lines(hit.file_path)
        if lines and end <= len(lines):
            first, last = max(1, start - context_lines), min(len(lines), end + context_lines)
            return "\n".join(lines[first - 1:last])
    return hit.text


def render_markdown(answer: SearchResults, *, context_lines: int, read_lines: ReadLines,
                    budget: int = REPLY_BUDGET_CHARS) -> str:
    """The search answer as numbered Markdown hits, within `budget` characters."""
    hits = answer.results
    parts = [f"Search results for: {md_code(answer.query)}\n"]
    used = len(parts[0])
    for rank, hit in enumerate(hits, start=1):
        where = md_code(hit.display_path + place(hit.start_line, hit.page_start, hit.page_end, hit.slide, hit.sheet))
        named = hit.heading or hit.title
        heading = f" — {md_code(named)}" if named else ""
        more = f" and {hit.also_in_more} more" if hit.also_in_more else ""
        also = (" (also in " + ", ".join(md_code(f"{a.display_path or a.source}{hit_place(a)}")
                                         for a in hit.also_in) + more + ")") if hit.also_in else ""
        body = _excerpt(hit, context_lines, read_lines).strip("\n")
        fence = _fence(body)
        block = f"{rank}. {where}{heading}{also}\n{fence}\n{body}\n{fence}\n"
        if used + len(block) > budget and rank > 1:
            parts.append(f"({len(hits) - rank + 1} more hits left out to stay within {budget:,} characters; "
                         "ask with a smaller topK or read them with read_file)\n")
            break
        parts.append(block)
        used += len(block)
    if not hits:
        parts.append("No passage matched.\n")
    return "\n".join(parts)
