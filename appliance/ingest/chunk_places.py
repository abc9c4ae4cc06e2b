"""Where a chunk sits in its document: page, sheet and slide.

Converters mark pages and sheets with comment lines (`markdown_blocks.LOCATION_MARKER`).
They are not words of the document, so the chunker blanks them out of the text before it
cuts, and keeps their offsets here to give every chunk its page range, sheet and slide.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar

from appliance.ingest.markdown_blocks import LOCATION_MARKER

_V = TypeVar("_V", int, str)


class Place(TypedDict):
    """Where a chunk sits in its document, as Chunk's fields of the same names."""

    page_start: int | None
    page_end: int | None
    sheet: str | None
    slide: int | None


@dataclass(slots=True)
class Locations:
    """Where pages, sheets and slides start in the (blanked) document, by character offset."""

    pages: list[tuple[int, int]] = field(default_factory=list)
    sheets: list[tuple[int, str]] = field(default_factory=list)
    slides: list[tuple[int, int]] = field(default_factory=list)

    @staticmethod
    def _at(marks: list[tuple[int, _V]], offset: int) -> _V | None:
        k = bisect_right(marks, offset, key=lambda m: m[0])
        return marks[k - 1][1] if k else None

    def new_page(self, a: int, b: int) -> bool:
        """True when a page starts in (a, b]."""
        return bool(self.pages) and self._at(self.pages, a) != self._at(self.pages, b)

    def of(self, start: int, end: int) -> Place:
        """page_start/page_end/sheet/slide of the text md[start:end]."""
        last = max(start, end - 1)
        return Place(page_start=self._at(self.pages, start), page_end=self._at(self.pages, last),
                     sheet=self._at(self.sheets, start), slide=self._at(self.slides, start))


_SLIDE_LINE = re.compile(r"^[ \t]*<!--\s*Slide number:\s*(\d+)\s*-->[ \t]*$", re.M)


def blank_markers(markdown: str) -> tuple[str, Locations]:
    """The document with each page/sheet marker line emptied (line numbers stay), and where
    each page, sheet and slide starts in it. Slide markers stay: they head their sections."""
    locs = Locations()
    if "<!--" not in markdown:
        return markdown, locs
    parts: list[str] = []
    last = removed = 0
    for m in LOCATION_MARKER.finditer(markdown):
        kind, value = m.group(1), m.group(2).strip()
        if kind == "Page number" and not value.isdigit():
            continue
        parts.append(markdown[last:m.start()])
        pos = m.start() - removed
        removed += m.end() - m.start()
        last = m.end()
        if kind == "Page number":
            locs.pages.append((pos, int(value)))
        else:
            locs.sheets.append((pos, value))
    parts.append(markdown[last:])
    text = "".join(parts)
    locs.slides = [(m.start(), int(m.group(1))) for m in _SLIDE_LINE.finditer(text)]
    return text, locs
