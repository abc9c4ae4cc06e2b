"""Several processes write one index at once, as the scheduler, the MCP server and a CLI do.

LanceDB answers a lost commit race with a retryable conflict; the store repeats the
write, so nothing fails, nothing is misnamed as damage, and every row arrives.
"""
from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import pytest

from appliance.config import replica_budget
from appliance.errors import IndexBusy, IndexCorrupt, is_commit_conflict, storage_error
from appliance.storage.filters import Filter
from appliance.storage.index import Index
from appliance.storage.tables import SourceRow, chunk_schema

DIM = 8
CONFLICT_TEXT = ("lance error: Retryable commit conflict for version 43: This Rewrite transaction was preempted "
                 "by concurrent transaction Update at version 43. Please retry., "
                 "/root/.cargo/registry/src/lance-13.0.0/src/io/commit/conflict_resolver.rs:1288:34")


def _rows(source_id: str, n: int) -> list[dict]:
    rng = np.random.default_rng(abs(hash(source_id)) % 2**32)
    out = []
    for i in range(n):
        v = rng.normal(size=DIM).astype("float32")
        out.append({f.name: None for f in chunk_schema(DIM)} | {
            "id": f"{source_id}:{i}", "source_id": source_id, "source_kind": "data", "chunk_index": i,
            "text": f"text {i} of {source_id}", "keywords": f"word{i} {source_id}",
            "parent_id": f"{source_id}:s0", "ingested_at": time.time(), "vector": (v / np.linalg.norm(v)).tolist()})
    return out


def _writer(db: str, name: str, rounds: int, queue: mp.Queue[tuple[str, int, str]],
            rebuilds: bool = False) -> None:
    if rebuilds:  # a vector index from 10 rows, rebuilt whenever a fold leaves it in two segments
        from appliance.storage import writes as store_writes

        store_writes.VECTOR_INDEX_MIN_ROWS, store_writes.SEGMENTS_MAX = 10, 1
    index = Index(Path(db), DIM, memory_budget=0 if rebuilds else replica_budget())
    error = ""
    try:
        for r in range(rounds):
            sid = f"{name}-{r}"
            index.writes.replace_sources([SourceRow(source_id=sid, source_kind="data", chunk_count=3)], _rows(sid, 3))
            if r % 3 == 0:
                index.writes.refresh_indexes(fold_now=True)  # compaction and index updates: the writes that lose races
            if r % 5 == 4:
                index.writes.delete_sources([f"{name}-{r - 1}"])
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test with it
        error = f"{type(exc).__name__}: {exc}"
    queue.put((name, index.conflicts_retried, error))


def _start_writers(db: Path, count: int, rounds: int, rebuilds: bool = False) -> tuple[list, mp.Queue]:
    """A seeded index and `count` _writer processes running `rounds` rounds each on it."""
    seed = SourceRow(source_id="seed", source_kind="data", chunk_count=3)
    Index(db, DIM, memory_budget=replica_budget()).writes.replace_sources([seed], _rows("seed", 3))
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(db), f"w{i}", rounds, queue, rebuilds)) for i in range(count)]
    for p in procs:
        p.start()
    return procs, queue


def _results(procs: list, queue: mp.Queue) -> list[tuple[str, int, str]]:
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    return results


def test_a_commit_conflict_is_busy_never_corrupt() -> None:
    exc = RuntimeError(CONFLICT_TEXT)
    assert is_commit_conflict(exc)
    named = storage_error(exc, "the index at /index")
    assert isinstance(named, IndexBusy) and not isinstance(named, IndexCorrupt)
    assert "sync --clean" not in (named.hint or "")
    missing = RuntimeError("lance error: Not found: chunks.lance/data/x.lance")
    assert isinstance(storage_error(missing, "x"), IndexCorrupt)


@pytest.mark.slow  # three writer processes
@pytest.mark.parametrize("rebuilds", [False, True], ids=["folds", "vector-index-rebuilds"])
def test_three_processes_writing_at_once_lose_nothing(tmp_path: Path, rebuilds: bool) -> None:
    db = tmp_path / "index"
    rounds = 24
    procs, queue = _start_writers(db, 3, rounds, rebuilds)
    results = _results(procs, queue)
    errors = [f"{name}: {err}" for name, _n, err in results if err]
    assert not errors, errors
    index = Index(db, DIM, memory_budget=replica_budget())
    expected = {"seed"} | {f"w{i}-{r}" for i in range(3) for r in range(rounds) if not (r % 5 == 3 and r + 1 < rounds)}
    assert {s.source_id for s in index.registry.source_rows()} == expected
    assert index.registry.chunk_counts() == dict.fromkeys(expected, 3)
    if rebuilds:  # the index the writers rebuilt under each other finds every chunk by its own vector
        index.memory_budget = 0
        assert index.writes.has_vector_index() and index.reader.query_path(index.registry.count_chunks()) == "index"
        for row in index.reader.chunk_rows("source_id IS NOT NULL", ["id", "vector"]):
            assert index.reader.vector_search(row["vector"], 1, None, ["id"])[0]["id"] == row["id"]
    print("conflicts retried per writer:", {name: n for name, n, _ in results})


@pytest.mark.slow  # two writer processes
def test_queries_while_other_processes_write_follow_every_commit(tmp_path: Path) -> None:
    """The replica refreshes from other processes' commits (adds, deletes, compactions) as they land,
    reading only the rows it does not hold, and ends equal to a fresh read of the table."""
    db = tmp_path / "index"
    rounds = 15
    procs, queue = _start_writers(db, 2, rounds)
    index = Index(db, DIM, memory_budget=replica_budget())
    probe = _rows("probe", 1)[0]["vector"]
    queries = refreshes = 0
    version = -1
    while any(p.is_alive() for p in procs):
        index.checkout_latest()
        hits = index.reader.vector_search(probe, 5, Filter("seed"), ["id", "source_id"])
        assert hits and all(h["source_id"] == "seed" for h in hits)
        queries += 1
        refreshes += index.reader._replica.version != version
        version = index.reader._replica.version
    results = _results(procs, queue)
    assert not [err for _, _, err in results if err]
    index.checkout_latest()
    index.reader.vector_search(probe, 5, None, ["id"])
    fresh = Index(db, DIM, memory_budget=replica_budget())
    fresh.reader.vector_search(probe, 5, None, ["id"])
    assert index.reader._replica.rows.sort_by("id") == fresh.reader._replica.rows.sort_by("id")
    written = 3 + 2 * rounds * 3
    print(f"{queries} queries, {refreshes} refreshes, {index.reader.replica_rows_read} rows read "
          f"({written} rows written; a whole re-read per refresh would read "
          f"~{refreshes * fresh.registry.count_chunks() // 2})")
    assert refreshes > 1 and index.reader.replica_rows_read <= written + fresh.registry.count_chunks()


@pytest.mark.slow  # two writer processes
def test_queries_through_the_vector_index_while_other_processes_rebuild_it(tmp_path: Path) -> None:
    """A reader past the replica's budget searches LanceDB's vector index, scoped and not, while two
    writers add, delete, compact and rebuild that index under it: every answer comes back, in order,
    the scoped one only from inside its scope."""
    db = tmp_path / "index"
    procs, queue = _start_writers(db, 2, 15, rebuilds=True)
    index = Index(db, DIM, memory_budget=0)
    probe = _rows("probe", 1)[0]["vector"]
    queries = 0
    while any(p.is_alive() for p in procs):
        index.checkout_latest()
        scoped = index.reader.vector_search(probe, 5, Filter("seed"), ["id", "source_id"])
        assert scoped and all(h["source_id"] == "seed" for h in scoped)
        whole = index.reader.vector_search(probe, 5, None, ["id", "_distance"])
        assert whole and [h["_distance"] for h in whole] == sorted(h["_distance"] for h in whole)
        queries += 1
    results = _results(procs, queue)
    assert not [err for _, _, err in results if err]
    assert queries > 0 and index.writes.has_vector_index()
    print("queries during the writers' rebuilds:", queries)
