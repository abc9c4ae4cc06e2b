"""Where in its document a hit is, as people read it: the CLI prints it, the status page shows it."""
from __future__ import annotations

from typing import Any


def hit_place(hit: dict[str, Any]) -> str:
    """Where in its document a hit is, as the CLI prints it after the path: ":12" (line),
    " p.3" / " pp.3-4" (PDF pages), " slide 2", " sheet Budget"."""
    line = hit.get("startLine") or hit.get("lineNumber")  # a search hit's first line, a grep match's line
    if line:
        return f":{line}"
    if hit.get("pageStart"):
        a, b = hit["pageStart"], hit.get("pageEnd") or hit["pageStart"]
        return f" p.{a}" if a == b else f" pp.{a}-{b}"
    if hit.get("slide"):
        return f" slide {hit['slide']}"
    if hit.get("sheet"):
        return f" sheet {hit['sheet']}"
    return ""
