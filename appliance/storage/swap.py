"""A source's chunks replaced in one LanceDB commit, so a reader never sees it with none.

Deleting a source's old chunks and adding its new ones were two commits: a query
landing between them (another process reads the latest version every second) found
neither, and a re-indexed document briefly vanished from the answers. A merge on the
chunk id does both at once: new ids are inserted and ids kept are updated in place.
Old chunks the new rows do not name (the document shrank) are deleted by the same
merge (`when_not_matched_by_source_delete`, scoped to those sources) - but that
clause makes LanceDB scan every row of the table (~0.5 s at 100,000 chunks, against
~15 ms for the merge alone), so it is added only when a lookup of the sources'
current ids (~20 ms, through the source_id index) finds such chunks. Sources with no
chunks yet are simply appended.
scripts/bench_replace.py measures it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:  # the storage modules (store*.py) stay the only ones that import lancedb
    from lancedb.table import Table

    from appliance.storage.tables import Tables

SOURCES_PER_COMMIT = 200
"""Sources whose ids one commit's filter names (a long IN list slows the filter's planning);
a larger write is several commits, each of which replaces its sources whole."""


def replace_chunks(tables: Tables, source_ids: Sequence[str], rows: list[dict[str, Any]], schema: pa.Schema,
                   naming: Callable[[Sequence[str]], str]) -> None:
    """Make `rows` the only chunks of `source_ids`, one commit per SOURCES_PER_COMMIT sources.

    `naming(ids)` is the SQL filter that selects the chunks of those sources. Each read, merge and delete is
    bound by `tables.deadline`."""
    table = tables.chunks(create=True)
    by_source: dict[str, list[dict[str, Any]]] = {sid: [] for sid in source_ids}
    for row in rows:
        by_source.setdefault(row["source_id"], []).append(row)
    ids = list(by_source)
    for start in range(0, len(ids), SOURCES_PER_COMMIT):
        group = ids[start:start + SOURCES_PER_COMMIT]
        scope = naming(group)
        batch = [r for sid in group for r in by_source[sid]]
        if not batch:  # nothing to add: a plain delete is one commit already
            tables.delete_rows(table, scope, "id")
            continue
        data = pa.Table.from_pylist(batch, schema=schema)
        old = _ids(table, scope, tables.deadline)
        if not old:  # new sources (a first sync): nothing to swap, and an append is the cheapest commit
            table.add(data)
            continue
        merge = table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
        if not old <= set(data.column("id").to_pylist()):
            merge = merge.when_not_matched_by_source_delete(scope)
        merge.execute(data, timeout=tables.deadline)


def _ids(table: Table, where: str, deadline: timedelta | None) -> set[str]:
    ids: list[str] = (table.search().where(where).select(["id"]).limit(None).to_arrow(timeout=deadline)
                      .column("id").to_pylist())
    return set(ids)
