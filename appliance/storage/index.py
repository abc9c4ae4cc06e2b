"""The index a process holds: its tables, and the three parts that work on them.

`index.writes` (storage.writes.IndexWriter) writes and keeps the indexes folded, `index.registry`
(storage.sources.SourceRegistry) answers what the index knows of each document, and `index.reader`
(storage.reads.IndexReader) serves every query read. The tables themselves (opening, identity,
`checkout_latest`) are the index's own (store.Tables).
"""
from __future__ import annotations

from pathlib import Path

from appliance.config import Bucket
from appliance.storage.reads import IndexReader
from appliance.storage.sources import SourceRegistry
from appliance.storage.tables import Tables
from appliance.storage.writes import IndexWriter


class Index(Tables):
    """Read and write access to one DB_PATH. Safe to share between threads.

    `memory_budget` is the bytes of the index this process may hold in memory (the resolved
    Settings.replica_budget_bytes): it chooses between the exact in-memory ranking and LanceDB's."""

    def __init__(self, db_path: Path, dim: int, *, memory_budget: int, bucket: Bucket | None = None) -> None:
        super().__init__(db_path, dim, memory_budget=memory_budget, bucket=bucket)
        self.reader = IndexReader(self)
        self.registry = SourceRegistry(self)
        self.writes = IndexWriter(self, on_drop=self.reader.forget)
