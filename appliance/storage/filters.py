"""What a search may return: a path scope and a doc class, as one mask over the chunks.

A filter chooses the chunks a search ranks: both sides find their best chunks inside
it, however deep, and fusion (search.fusion) ranks them by the same rule as the whole
index's. It is kept as data, not SQL, so the in-memory replica can apply it as a boolean
mask and LanceDB as a prefilter, and both select the same rows.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Filter:
    """`prefix`: a source id or a folder of them (matched at a `/` boundary); `doc_class`: exact."""

    prefix: str | None = None
    doc_class: str | None = None

    COLUMNS = ("source_id", "doc_class")
    """What `keeps` reads of a row."""

    def keeps(self, row: Mapping[str, object]) -> bool:
        """Whether the row (with COLUMNS) passes: the same rows as store's prefilter selects."""
        source_id = str(row["source_id"])
        if self.prefix is not None and source_id != self.prefix and not source_id.startswith(self.folder):
            return False
        return self.doc_class is None or row["doc_class"] == self.doc_class

    @property
    def folder(self) -> str:
        """The prefix of every source id below `prefix` (`/docs/proj` never matches `/docs/project-x`)."""
        return f"{self.prefix}/"
