"""A long run of writes folds its rows into the indexes as it goes, so no write scans an ever-growing
tail of rows no index covers (scripts/bench_scale.py --flat measures the sync rate this keeps flat)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.config import replica_budget
from appliance.storage import writes as store_writes
from appliance.storage.index import Index
from appliance.storage.tables import SourceRow, chunk_schema

DIM = 8


def _write(index: Index, first: int, count: int, dim: int = DIM) -> None:
    sources = [SourceRow(source_id=f"/docs/{n:04d}.md", source_kind="file", chunk_count=1, ingested_at=1.0)
               for n in range(first, first + count)]
    rng = np.random.default_rng(first)
    rows = [{f.name: None for f in chunk_schema(dim)} | {
        "id": f"k{n}:0", "source_id": f"/docs/{n:04d}.md", "chunk_index": 0, "text": f"turbine blade {n}",
        "keywords": f"turbin blade n{n}", "parent_id": f"k{n}:s0", "embed_key": f"e{n}", "ingested_at": 1.0,
        "vector": rng.standard_normal(dim).astype("float32").tolist()} for n in range(first, first + count)]
    index.writes.replace_sources(sources, rows)


def test_writes_fold_their_rows_into_the_indexes_every_so_many_rows(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_writes, "FOLD_EVERY_ROWS", 30)
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    _write(index, 0, 20)
    assert not index.writes.has_fts_index()  # below the threshold: nothing folded yet
    _write(index, 20, 20)
    assert index.writes.has_fts_index() and index.writes.unindexed_rows() == 0 and index.writes.rows_unfolded == 0
    sources = index.sources()
    assert sources is not None and any(tuple(i.columns) == ("source_id",) for i in sources.list_indices())
    _write(index, 40, 20)
    assert index.writes.unindexed_rows() == 20 and index.writes.rows_unfolded == 20
    _write(index, 10, 20)  # rewrites of indexed sources: replaced, never doubled
    assert index.registry.count_chunks() == 60 and index.writes.unindexed_rows() == 0
    assert sorted(r.source_id for r in index.registry.source_rows()) == [f"/docs/{n:04d}.md" for n in range(60)]
    hits = index.reader.keyword_search("n15", 5, None, ["id"])
    assert [h["id"] for h in hits] == ["k15:0"]


def test_a_table_without_indexes_gets_them_after_the_first_rows_due(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_writes, "FOLD_DUE_ROWS", 15)
    monkeypatch.setattr(store_writes, "FOLD_EVERY_ROWS", 1_000)
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    _write(index, 0, 10)
    assert not index.writes.has_fts_index()
    _write(index, 10, 10)  # 20 rows with no index: built now, not after FOLD_EVERY_ROWS
    assert index.writes.has_fts_index() and index.writes.unindexed_rows() == 0
    _write(index, 20, 20)
    assert index.writes.unindexed_rows() == 20  # indexed: the run folds every FOLD_EVERY_ROWS again

    later = Index(tmp_path, DIM, memory_budget=replica_budget())  # a new run over the indexed table
    _write(later, 40, 20)
    assert later.writes.unindexed_rows() == 40 and later.writes.rows_unfolded == 20
    later.writes.drop_all()
    _write(later, 0, 20)
    assert later.writes.has_fts_index() and later.writes.unindexed_rows() == 0


def test_a_stop_leaves_the_folding_to_the_next_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_writes, "FOLD_EVERY_ROWS", 10)
    monkeypatch.setattr(store_writes.stopping, "requested", lambda: True)
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    _write(index, 0, 20)
    assert not index.writes.has_fts_index() and index.registry.count_chunks() == 20


def test_a_small_write_waits_for_the_next_fold_and_is_searched_meanwhile(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_writes, "FOLD_DUE_ROWS", 15)
    monkeypatch.setattr(store_writes, "FOLD_DUE_FRAGMENTS", 1_000)
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    _write(index, 0, 20)
    index.writes.refresh_indexes()  # the first refresh builds the indexes over every row
    _write(index, 20, 10)
    index.writes.refresh_indexes()
    assert index.writes.unindexed_rows() == 10  # below FOLD_DUE_ROWS: not folded
    assert [h["id"] for h in index.reader.keyword_search("n25", 5, None, ["id"])] == ["k25:0"]
    _write(index, 30, 10)
    index.writes.refresh_indexes()
    assert index.writes.unindexed_rows() == 0  # 20 waiting: folded


def test_many_small_writes_fold_by_their_fragments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_writes, "FOLD_DUE_FRAGMENTS", 5)
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    _write(index, 0, 5)
    index.writes.refresh_indexes()
    for n in range(5, 8):  # one fragment each: 4 with the first
        _write(index, n, 1)
        index.writes.refresh_indexes()
    assert index.writes.unindexed_rows() == 3
    _write(index, 8, 1)
    index.writes.refresh_indexes()
    assert index.writes.unindexed_rows() == 0


def test_the_vector_index_comes_only_once_queries_leave_the_replica(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.storage import replica

    monkeypatch.setattr(store_writes, "VECTOR_INDEX_MIN_ROWS", 10)
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    _write(index, 0, 40)
    index.writes.refresh_indexes(fold_now=True)
    assert index.reader.query_path(40) == "memory" and not index.writes.has_vector_index()  # folds skip its upkeep
    index.memory_budget = replica.estimated_bytes(30, DIM)
    _write(index, 40, 10)
    index.writes.refresh_indexes()
    assert index.reader.query_path(50) == "index" and index.writes.has_vector_index()
    chunks = index.chunks()
    assert chunks is not None
    probe = chunks.search().where("id = 'k45:0'").select(["vector"]).to_list()[0]["vector"]
    assert index.reader.vector_search(probe, 1, None, ["id"])[0]["id"] == "k45:0"
    index.memory_budget = replica.estimated_bytes(60, DIM)
    index.writes.refresh_indexes()
    assert index.writes.has_vector_index()  # fits, but not by the margin: kept
    index.memory_budget = replica.estimated_bytes(63, DIM)
    index.writes.refresh_indexes()
    assert index.reader.query_path(50) == "memory" and not index.writes.has_vector_index()
    assert index.reader.vector_search(probe, 1, None, ["id"])[0]["id"] == "k45:0"


def test_folds_never_split_the_vector_index_into_more_than_so_many_segments(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.storage import replica

    monkeypatch.setattr(store_writes, "VECTOR_INDEX_MIN_ROWS", 10)
    monkeypatch.setattr(store_writes, "SEGMENTS_MAX", 2)
    index = Index(tmp_path, DIM, memory_budget=replica.estimated_bytes(5, DIM))
    _write(index, 0, 40)
    index.writes.refresh_indexes(fold_now=True)
    chunks = index.chunks()
    assert chunks is not None

    def segments() -> int:
        return next(i.num_segments for i in chunks.list_indices() if tuple(i.columns) == ("vector",))

    seen = []
    for first in range(40, 100, 10):
        _write(index, first, 10)
        index.writes.refresh_indexes(fold_now=True)
        seen.append(segments())
    assert max(seen) <= 2 and 2 in seen  # folds added segments; past the bound the index became one again
    assert 1 in seen[seen.index(2):]
    probe = chunks.search().where("id = 'k95:0'").select(["vector"]).to_list()[0]["vector"]
    assert index.reader.vector_search(probe, 1, None, ["id"])[0]["id"] == "k95:0"
    assert index.writes.unindexed_rows() == 0 and index.registry.count_chunks() == 100


def _exact(index: Index, probe: list[float]) -> list[str]:
    """Every chunk id, nearest to `probe` first (a scan of every stored vector)."""
    chunks = index.chunks()
    assert chunks is not None
    rows = chunks.search().select(["id", "vector"]).limit(None).to_list()
    unit = np.asarray(probe) / np.linalg.norm(probe)
    return [r["id"] for r in sorted(rows, key=lambda r: (-float(unit @ (np.asarray(r["vector"]) /
                                                                         np.linalg.norm(r["vector"]))), r["id"]))]


def test_the_vector_index_is_partitioned_and_a_scope_of_one_file_gets_all_its_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the replica's budget the vector index is IVF over one-bit codes, a partition per
    VECTOR_PARTITION_ROWS rows. A search scans a share of the partitions; one inside a scope goes on
    through further partitions until it has as many rows inside the scope as it asks for, so a scope of a
    few rows, which lie in a few partitions, still gets each of them, nearest first."""
    from appliance.storage import replica, tables as store_tables
    from appliance.storage.filters import Filter

    _small_partitions(monkeypatch)
    dim = 128  # a one-bit code a dimension tells vectors apart only in many dimensions
    index = Index(tmp_path, dim, memory_budget=replica.estimated_bytes(5, dim))
    _write(index, 0, 400, dim)
    index.writes.refresh_indexes()
    chunks = index.chunks()
    assert chunks is not None
    vectors = next(i for i in chunks.list_indices() if tuple(i.columns) == ("vector",))
    assert vectors.index_type == store_tables.VECTOR_INDEX_TYPE == "IvfRq"
    probe = np.random.default_rng(7).standard_normal(dim).tolist()
    whole = [r["id"] for r in index.reader.vector_search(probe, 10, None, ["id"])]
    exact = _exact(index, probe)
    assert len(whole) == 10 and whole == sorted(whole, key=exact.index)  # re-ranked on the stored vectors
    for n in (3, 171, 399):  # a file of one chunk, wherever its partition lies
        scope = f"/docs/{n:04d}.md"
        assert [r["id"] for r in index.reader.vector_search(probe, 10, Filter(scope), ["id"])] == [f"k{n}:0"]
    folder = [r["id"] for r in index.reader.vector_search(probe, 10, Filter("/docs"), ["id"])]
    assert folder == whole  # a scope holding every chunk answers as no scope


def test_an_earlier_versions_hnsw_index_answers_until_the_next_refresh_replaces_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lancedb.index import IvfHnswSq

    from appliance.storage import replica

    monkeypatch.setattr(store_writes, "VECTOR_INDEX_MIN_ROWS", 10)
    index = Index(tmp_path, DIM, memory_budget=replica.estimated_bytes(5, DIM))
    _write(index, 0, 60)
    index.writes.refresh_indexes()
    chunks = index.chunks()
    assert chunks is not None
    chunks.create_index("vector", config=IvfHnswSq(distance_type="cosine"), replace=True)

    def kind() -> str:
        return next(i.index_type for i in chunks.list_indices() if tuple(i.columns) == ("vector",))

    assert kind() == "IvfHnswSq"
    probe = chunks.search().where("id = 'k33:0'").select(["vector"]).to_list()[0]["vector"]
    assert index.reader.vector_search(probe, 1, None, ["id"])[0]["id"] == "k33:0"
    index.writes.refresh_indexes()
    assert kind() == "IvfRq"
    assert index.reader.vector_search(probe, 1, None, ["id"])[0]["id"] == "k33:0"


def test_an_earlier_versions_one_bit_index_answers_until_the_next_refresh_builds_this_versions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index of one-bit codes re-ranks its candidates on the stored vectors (reads.ONE_BIT_REFINED) and finds
    the nearest; the next refresh builds it anew with this version's codes, which find it as well."""
    from lancedb.index import IvfRq

    from appliance.storage import replica, tables as store_tables

    _small_partitions(monkeypatch)
    dim = 64
    index = Index(tmp_path, dim, memory_budget=replica.estimated_bytes(5, dim))
    _write(index, 0, 200, dim)
    chunks = index.chunks()
    assert chunks is not None
    chunks.create_index("vector", config=IvfRq(distance_type="cosine", target_partition_size=10, num_bits=1))

    def bits() -> int | None:
        return store_tables.code_bits(store_tables.vector_index(chunks))

    assert bits() == 1
    probe = chunks.search().where("id = 'k123:0'").select(["vector"]).to_list()[0]["vector"]
    assert index.reader.vector_search(probe, 1, None, ["id"])[0]["id"] == "k123:0"
    index.writes.refresh_indexes()
    assert bits() == store_tables.VECTOR_CODE_BITS == 4
    assert index.reader.vector_search(probe, 1, None, ["id"])[0]["id"] == "k123:0"


def test_a_search_probes_a_share_of_the_partitions_the_index_has(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader counts each vector index's partitions once, beside the queries, and a search probes PROBED_SHARE
    of them: a fold that splits partitions is followed. Until a count is in, the last index's count serves, or
    at first the estimate for the index's rows."""
    import time

    from appliance.storage import reads as store_reads, tables as store_tables

    dim = 32
    index, chunks = _partitioned(tmp_path, monkeypatch, dim)
    probed: list[int] = []
    real = store_reads._nearest

    def nearest(*args, **kwargs):  # type: ignore[no-untyped-def]
        probed.append(args[6])  # the partitions it probes a share of
        return real(*args, **kwargs)

    monkeypatch.setattr(store_reads, "_nearest", nearest)

    def settled() -> int:
        """The partitions a search probes a share of, once the reader has counted the current index's."""
        uuid = str(store_tables.vector_index(chunks).index_uuid)
        deadline = time.monotonic() + 30
        while uuid not in index.reader._partitions and time.monotonic() < deadline:
            time.sleep(0.02)
        probed.clear()
        index.reader.vector_search([1.0] * dim, 5, None, ["id"])
        return probed[0]

    vectors = store_tables.vector_index(chunks)
    assert index.reader.vector_search([1.0] * dim, 5, None, ["id"]) and probed == [6]  # 60 rows: the estimate
    assert settled() == _partition_count(chunks) == store_reads.counted_partitions(chunks, vectors)
    before = _partition_count(chunks)
    _write(index, 60, 340, dim)
    index.writes.refresh_indexes(fold_now=True)
    probed.clear()
    index.reader.vector_search([1.0] * dim, 5, None, ["id"])
    assert probed == [before]  # a new index: the last count serves until its own is in
    assert settled() == _partition_count(chunks) > before


def _partitioned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dim: int) -> tuple[Index, Any]:
    """An index of 60 rows past the replica's budget, with its vector index in small partitions, and its table."""
    from appliance.storage import replica

    _small_partitions(monkeypatch)
    index = Index(tmp_path, dim, memory_budget=replica.estimated_bytes(5, dim))
    _write(index, 0, 60, dim)
    index.writes.refresh_indexes()
    chunks = index.chunks()
    assert chunks is not None
    return index, chunks


def _partition_count(chunks: Any) -> int:
    """The vector index's partitions, the most of its segments', as Lance's statistics give them."""
    return max(segment["num_partitions"] for segment in chunks.to_lance().stats.index_stats("vector_idx")["indices"])


def _small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vector index past 10 rows, with partitions of ~10 rows, searched as a large one is."""
    from lancedb.index import IvfRq

    from appliance.storage import reads as store_reads

    monkeypatch.setattr(store_writes, "VECTOR_INDEX_MIN_ROWS", 10)
    monkeypatch.setattr(store_writes, "VECTOR_INDEX", IvfRq(distance_type="cosine", target_partition_size=10,
                                                           num_bits=store_writes.VECTOR_CODE_BITS))
    monkeypatch.setattr(store_reads, "VECTOR_PARTITION_ROWS", 10)
    monkeypatch.setattr(store_reads, "MIN_PROBES", 1)


def test_an_index_of_few_partitions_is_searched_through_at_least_min_probes(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A share of few partitions is a coarse cut (reads.MIN_PROBES): over an index of a few partitions a search
    scans at least MIN_PROBES of them, and finds the true nearest where a third of them did not."""
    from appliance.storage import reads as store_reads

    dim = 32
    index, chunks = _partitioned(tmp_path, monkeypatch, dim)
    assert _partition_count(chunks) < 16
    probes = [np.random.default_rng(seed).standard_normal(dim).tolist() for seed in range(20)]
    exact = [_exact(index, probe)[:5] for probe in probes]

    def found() -> list[list[str]]:
        return [[r["id"] for r in index.reader.vector_search(probe, 5, None, ["id"])] for probe in probes]

    share_only = found()  # _small_partitions: a third of them, as a large index is searched
    monkeypatch.setattr(store_reads, "MIN_PROBES", 16)
    assert found() == exact
    assert share_only != exact


def test_the_vector_partitions_grow_with_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Folds add rows to the partitions the index was trained with, and Lance splits those that grow past
    the index's partition size: the partitions keep up with the table without the index being built anew."""
    dim = 32
    index, chunks = _partitioned(tmp_path, monkeypatch, dim)
    seen = [_partition_count(chunks)]
    for first, count in ((60, 140), (200, 200), (400, 400)):
        _write(index, first, count, dim)
        index.writes.refresh_indexes(fold_now=True)
        seen.append(_partition_count(chunks))
    assert seen[0] >= 3 and seen[-1] >= 4 * seen[0], seen
    assert index.writes.unindexed_rows() == 0
    probe = chunks.search().where("id = 'k650:0'").select(["vector"]).to_list()[0]["vector"]
    assert index.reader.vector_search(probe, 1, None, ["id"])[0]["id"] == "k650:0"
