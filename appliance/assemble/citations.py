"""Where in its document a hit is, as people read it: the CLI prints it, the status page shows it."""
from __future__ import annotations

from appliance.assemble.quoting import label
from appliance.results import GrepMatch, Passage, Place


def hit_place(hit: Passage | GrepMatch | Place) -> str:
    """`place` of a hit, a grep match or an alsoIn entry."""
    line = hit.line_number if isinstance(hit, GrepMatch) else hit.start_line
    return place(line, hit.page_start, hit.page_end, hit.slide, hit.sheet)


def place(line: int | None, page_start: int | None, page_end: int | None, slide: int | None,
          sheet: str | None) -> str:
    """Where in its document a passage is, as the CLI prints it after the path: ":12" (line),
    " p.3" / " pp.3-4" (PDF pages), " slide 2", " sheet Budget" (the sheet's name as a label: it is data)."""
    if line:
        return f":{line}"
    if page_start:
        b = page_end or page_start
        return f" p.{page_start}" if page_start == b else f" pp.{page_start}-{b}"
    if slide:
        return f" slide {slide}"
    if sheet:
        return f" sheet {label(sheet)}"
    return ""
