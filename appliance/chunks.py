"""The pipeline's own records, never on the wire: a converted document, its chunks, a chunk as stored
and as ranked (what the service returns to clients is in results.py)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

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


def body_of(text: str | None, body_start: int | None) -> str:
    """A stored chunk's own text: `text` after `body_start`, where its repeated context (heading breadcrumb, …) ends."""
    return (text or "")[body_start or 0:]


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """One chunk as the index stores it, read back for the query path: hits, their sections,
    documents, neighbours and grep. Built once per row where rows leave the index (storage.reads.IndexReader);
    the values are the stored ones (None where the column is null)."""

    id: str
    source_id: str
    source_kind: str
    root: str | None
    path: str
    """The display path: relative to its root, or the source id."""
    chunk_index: int
    text: str
    body_start: int | None
    title: str | None
    parent_id: str
    heading: str | None
    start_line: int | None
    end_line: int | None
    page_start: int | None
    page_end: int | None
    slide: int | None
    sheet: str | None
    doc_class: str | None
    ocr_engine: str | None
    snapshot_date: str | None
    also_unchanged_on: tuple[str, ...] | None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> StoredChunk:
        """The chunk of a row read with STORED_CHUNK_COLUMNS."""
        also = row["also_unchanged_on"]
        return cls(id=row["id"], source_id=row["source_id"], source_kind=row["source_kind"], root=row["root"],
                   path=row["path"], chunk_index=int(row["chunk_index"]), text=row["text"],
                   body_start=row["body_start"], title=row["title"], parent_id=row["parent_id"],
                   heading=row["heading"], start_line=row["start_line"], end_line=row["end_line"],
                   page_start=row["page_start"], page_end=row["page_end"], slide=row["slide"], sheet=row["sheet"],
                   doc_class=row["doc_class"], ocr_engine=row["ocr_engine"], snapshot_date=row["snapshot_date"],
                   also_unchanged_on=None if also is None else tuple(also))

    @property
    def body(self) -> str:
        """The chunk's own text, without its repeated context (heading breadcrumb, …)."""
        return body_of(self.text, self.body_start)

    def to_chunk(self) -> Chunk:
        """The chunker's record again (section ordinal is not needed here), to rebuild sections and documents."""
        return Chunk(index=self.chunk_index, section=0, text=self.text, body_start=self.body_start or 0,
                     start_line=self.start_line, end_line=self.end_line, heading=self.heading or "")


STORED_CHUNK_COLUMNS = [f.name for f in fields(StoredChunk)]
"""What the index reads of each chunk for a StoredChunk."""


@dataclass(frozen=True, slots=True)
class RankedChunk:
    """A hit after ranking: the stored chunk, its vector distance (None when only BM25 found it) and fused score."""

    chunk: StoredChunk
    distance: float | None
    score: float

    @property
    def id(self) -> str:
        return self.chunk.id
