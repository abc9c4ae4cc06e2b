"""A re-indexed source is swapped in one commit: a reader in another process never finds it without chunks."""
from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import replica_budget
from appliance.storage.index import Index
from appliance.storage.tables import SourceRow, chunk_schema

DIM = 8
WATCHED = "doc-watched"


def _rows(source: SourceRow, count: int, stamp: float) -> list[dict[str, Any]]:
    vector = (np.ones(DIM, dtype="float32") / np.sqrt(DIM)).tolist()
    return [{f.name: None for f in chunk_schema(DIM)} | {
        "id": f"{source.source_id}:{i}", "source_id": source.source_id, "chunk_index": i,
        "text": f"turbine blade {i}", "keywords": "turbin blade", "ingested_at": stamp, "vector": vector,
        "also_unchanged_on": []} for i in range(count)]


def _write(index: Index, source_id: str, count: int) -> None:
    stamp = time.time()
    source = SourceRow(source_id=source_id, source_kind="data", path=source_id, chunk_count=count, ingested_at=stamp)
    index.writes.replace_sources([source], _rows(source, count, stamp))


def _reader(db: str, stop: Any, counts: Any) -> None:
    """Another process, as a server beside a sync is: the latest version, read again and again."""
    index = Index(Path(db), DIM, memory_budget=replica_budget())
    while not stop.is_set():
        index.checkout_latest()
        counts.append(index.registry.count_chunks(f"source_id = '{WATCHED}'"))


def test_a_reader_never_sees_a_replaced_source_without_chunks(tmp_path: Path) -> None:
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    for n in range(20):  # other sources, so the table is not just the watched one
        _write(index, f"doc-{n}", 5)
    _write(index, WATCHED, 4)
    index.writes.refresh_indexes(fold_now=True)
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        stop, counts = manager.Event(), manager.list()
        reader = ctx.Process(target=_reader, args=(str(tmp_path), stop, counts))
        reader.start()
        deadline = time.monotonic() + 60
        while not counts and time.monotonic() < deadline:  # the reader is up and reading
            time.sleep(0.05)
        rounds = 0
        while rounds < 30 or (len(counts) < 100 and time.monotonic() < deadline):
            _write(index, WATCHED, (3, 6, 2, 4)[rounds % 4])  # grows and shrinks: both kinds of swap
            rounds += 1
        stop.set()
        reader.join(30)
        seen = list(counts)
    assert len(seen) >= 30, f"the reader read only {len(seen)} times"
    assert 0 not in seen, f"the source had no chunks in {seen.count(0)} of {len(seen)} reads"
    assert set(seen) <= {2, 3, 4, 6}, f"a reader saw a mix of old and new chunks: {sorted(set(seen))}"
    assert index.registry.count_chunks(f"source_id = '{WATCHED}'") == (3, 6, 2, 4)[(rounds - 1) % 4]
