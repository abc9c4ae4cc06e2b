"""The source registry: what the index knows of each document (its `sources` row) and how many
chunks it holds, read by a sync to decide what to skip, redo or delete and by `status`."""
from __future__ import annotations

from collections.abc import Sequence

from appliance.storage.tables import IN_BATCH, SOURCE_SCHEMA, SourceRow, Tables, guarded, in_list, sql_str


class SourceRegistry:
    """Reads of the `sources` table and of chunk counts per document. Safe to share between threads."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    @guarded
    def source_rows(self, where: str | None = None) -> list[SourceRow]:
        table = self.tables.sources()
        if table is None:
            return []
        query = table.search()
        if where:
            query = query.where(where)
        names = [f.name for f in SOURCE_SCHEMA]
        return [SourceRow(**{k: r[k] for k in names}) for r in query.limit(None).to_list(timeout=self.tables.deadline)]

    @guarded
    def count_chunks(self, where: str | None = None) -> int:
        chunks = self.tables.chunks()
        return 0 if chunks is None else self.tables.count_rows(chunks, where)

    def source(self, source_id: str) -> SourceRow | None:
        """One document's record, or None when the index does not know it."""
        rows = self.source_rows(f"source_id = {sql_str(source_id)}")
        return rows[0] if rows else None

    def sources_by_id(self, source_ids: Sequence[str]) -> dict[str, SourceRow]:
        """The records of those of `source_ids` the index knows, by id (read `IN_BATCH` at a time)."""
        return {s.source_id: s for start in range(0, len(source_ids), IN_BATCH)
                for s in self.source_rows(in_list("source_id", source_ids[start:start + IN_BATCH]))}

    def file_sources(self) -> list[SourceRow]:
        """The records of every file (no ingest_data or URL item)."""
        return self.source_rows("source_kind = 'file'")

    def item_sources(self) -> list[SourceRow]:
        """The records of every ingest_data and URL item (no file)."""
        return self.source_rows("source_kind != 'file'")

    def count_chunks_of(self, source_id: str) -> int:
        """Chunks stored for one document."""
        return self.count_chunks(f"source_id = {sql_str(source_id)}")

    def count_chunks_not_cut_by(self, scheme: str) -> int:
        """Chunks cut by a chunking scheme other than `scheme` (an older one: a sync re-cuts them)."""
        return self.count_chunks(f"scheme != {sql_str(scheme)}")

    @guarded
    def chunk_counts(self) -> dict[str, int]:
        """Rows in `chunks` per source id (what a sync compares with each source's chunk_count)."""
        chunks = self.tables.chunks()
        if chunks is None:
            return {}
        ids = chunks.search().select(["source_id"]).limit(None).to_arrow(timeout=self.tables.deadline)["source_id"]
        return {item["values"]: item["counts"] for item in ids.value_counts().to_pylist()}
