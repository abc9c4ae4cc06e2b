"""Records that flow through the pipeline: converted documents, chunks, hits."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

TokenCounter = Callable[[str], int]
"""Counts a text in the embedding model's own tokens, untruncated, without special tokens."""


@dataclass(frozen=True, slots=True)
class Converted:
    """One document turned into Markdown, with what the converter learned about it."""

    markdown: str
    title: str | None = None
    """The title chosen for the document (see ingest/titles.py), or None."""
    ocr_engine: str = ""
    """Engine that produced (part of) the text, "" when the file carried its own text."""
    has_lines: bool = False
    """True when line numbers of `markdown` are line numbers of the source file (md, txt)."""
    metadata: dict[str, str] = field(default_factory=dict)
    """Free-form facts from the converter (front matter type/tags, page count, ...)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """A token-sized retrieval unit cut from one document.

    `text` is what gets embedded and returned as a hit: repeated context (heading
    breadcrumb, a table's header row, a transcript window label) followed by the
    document's own content. `text[body_start:]` is that own content alone, which is
    what reconstruction of sections and documents joins together.
    """

    index: int
    section: int
    text: str
    body_start: int = 0
    start_line: int | None = None
    end_line: int | None = None
    heading: str = ""
    """The section's label: heading breadcrumb, slide number or time window."""
    page_start: int | None = None
    """First and last page (1-based) the body's text comes from, for paged sources (PDF)."""
    page_end: int | None = None
    sheet: str | None = None
    """The workbook sheet the chunk comes from (XLSX/XLS)."""
    slide: int | None = None
    """The slide number the chunk comes from (PPTX)."""

    @property
    def body(self) -> str:
        return self.text[self.body_start:]
