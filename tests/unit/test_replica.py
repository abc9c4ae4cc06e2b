"""The in-memory replica answers exactly what LanceDB answers, and follows every commit."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import appliance.storage.reads as store_reads
import appliance.storage.tables as store
from appliance.config import replica_budget
from appliance.storage import replica
from appliance.storage.filters import Filter
from appliance.storage.index import Index
from appliance.storage.tables import chunk_schema, in_list

DIM = 16
COLUMNS = ["id", "source_id", "parent_id", "chunk_index", "text"]


def _rows(n: int, seed: int, source: str = "/docs/a.md") -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        v = rng.normal(size=DIM).astype("float32")
        out.append({f.name: None for f in chunk_schema(DIM)} | {
            "id": f"{source}:{seed}:{i}", "source_id": source, "parent_id": f"{source}#{i // 3}",
            "chunk_index": i, "text": f"chunk {i}", "keywords": "x", "ingested_at": 1000.0 + seed,
            "vector": (v / np.linalg.norm(v)).tolist()})
    return out


def _index(tmp_path: Path, rows: list[dict], memory_budget: int | None = None) -> Index:
    index = Index(tmp_path, DIM, memory_budget=replica_budget() if memory_budget is None else memory_budget)
    index.chunks(create=True).add(pa.Table.from_pylist(rows, schema=chunk_schema(DIM)))
    return index


def _lancedb_nearest(index: Index, vector: list[float], limit: int) -> list[dict]:
    query = index.chunks().search(vector, vector_column_name="vector").distance_type("cosine")
    return query.bypass_vector_index().select([*COLUMNS, "_distance"]).limit(limit).to_list()


def test_nearest_equals_lancedbs_exact_search(tmp_path: Path) -> None:
    index = _index(tmp_path, _rows(300, seed=1))
    for probe in _rows(20, seed=2):
        ours = index.reader.vector_search(probe["vector"], 25, None, COLUMNS)
        assert index.reader._replica is not None  # served from memory
        theirs = _lancedb_nearest(index, probe["vector"], 25)
        assert [r["id"] for r in ours] == [r["id"] for r in theirs]
        assert [r["_distance"] for r in ours] == pytest.approx([r["_distance"] for r in theirs], abs=1e-5)
        assert {k: v for k, v in ours[0].items() if k != "_distance"} == \
               {k: v for k, v in theirs[0].items() if k != "_distance"}


def test_section_rows_equal_the_filtered_scan(tmp_path: Path) -> None:
    index = _index(tmp_path, _rows(60, seed=3) + _rows(30, seed=4, source="/docs/b.md"))
    parents = ["/docs/a.md#2", "/docs/b.md#0", "/docs/a.md#19", "/docs/none#1"]
    reader = index.reader
    assert reader.section_rows(parents, COLUMNS) == reader.chunk_rows(in_list("parent_id", parents), COLUMNS)
    assert index.reader._replica is not None
    assert len(index.reader.section_rows(parents, COLUMNS)) == 9


def test_a_commit_is_seen_by_the_next_search(tmp_path: Path) -> None:
    index = _index(tmp_path, _rows(50, seed=5))
    new = _rows(1, seed=6, source="/docs/new.md")[0]
    assert index.reader.vector_search(new["vector"], 1, None, COLUMNS)[0]["id"] != new["id"]
    index.writes.replace_sources([store.SourceRow(source_id="/docs/new.md", source_kind="file", root="/docs",
                                           path="new.md", content_hash="h", mtime_ns=0, size=1)], [new])
    assert index.reader.vector_search(new["vector"], 1, None, COLUMNS)[0]["id"] == new["id"]
    index.writes.delete_sources(["/docs/new.md"])
    assert index.reader.vector_search(new["vector"], 1, None, COLUMNS)[0]["id"] != new["id"]
    # another process's commit: this handle sees it after checkout_latest, as every search does
    other = Index(tmp_path, DIM, memory_budget=replica_budget())
    other.chunks().add(pa.Table.from_pylist([new], schema=chunk_schema(DIM)))
    index.checkout_latest()
    assert index.reader.vector_search(new["vector"], 1, None, COLUMNS)[0]["id"] == new["id"]


def _searches(index: Index, probe: list[float], where: Filter | None, limit: int) -> list[tuple[str, float]]:
    return [(r["id"], round(r["_distance"], 5)) for r in index.reader.vector_search(probe, limit, where, COLUMNS)]


@pytest.mark.parametrize("max_rows", [None, 10])
def test_a_filter_is_a_mask_over_the_whole_ranking(tmp_path: Path, max_rows: int | None) -> None:
    """In memory and through LanceDB (tables above the replica's memory budget) alike: the chunks inside
    a filter come in the order, and with the distances, they have in the unfiltered ranking, however deep."""
    index = _index(tmp_path, _rows(40, seed=7) + _rows(40, seed=8, source="/docs/b/c.md")
                   + _rows(5, seed=9, source="/docs/b-other.md"),
                   None if max_rows is None else replica.estimated_bytes(max_rows, DIM))
    scope = Filter("/docs/b")
    for probe in _rows(5, seed=10):
        whole = _searches(index, probe["vector"], None, 85)
        assert (index.reader._replica is not None) == (max_rows is None)
        assert index.reader.query_path(85) == ("memory" if max_rows is None else "index")
        inside = [hit for hit in whole if hit[0].startswith("/docs/b/c.md:")]
        assert _searches(index, probe["vector"], scope, 10) == inside[:10]
        assert _searches(index, probe["vector"], Filter("/docs"), 10) == whole[:10]
        assert _searches(index, probe["vector"], Filter(doc_class="note"), 10) == []
    assert len(index.reader.section_rows(["/docs/a.md#0"], COLUMNS)) == 3


def _fresh(tmp_path: Path) -> pa.Table:
    rows = Index(tmp_path, DIM, memory_budget=replica_budget())
    rows.reader.vector_search([1.0] * DIM, 1, None, COLUMNS)
    return rows.reader._replica.rows.sort_by("id")


def test_a_refreshed_replica_equals_a_fresh_read_and_reads_only_new_rows(tmp_path: Path) -> None:
    index = _index(tmp_path, _rows(60, seed=11))
    probe = _rows(1, seed=12)[0]["vector"]
    index.reader.vector_search(probe, 5, None, COLUMNS)
    assert index.reader.replica_rows_read == 60
    source = store.SourceRow(source_id="/docs/new.md", source_kind="file", content_hash="h")
    index.writes.replace_sources([source], _rows(7, seed=13, source="/docs/new.md"))
    index.reader.vector_search(probe, 5, None, COLUMNS)
    assert index.reader.replica_rows_read == 67  # the seven added
    index.chunks().delete("chunk_index < 20 AND source_id = '/docs/a.md'")
    index.reader.vector_search(probe, 5, None, COLUMNS)
    assert index.reader.replica_rows_read == 67  # a deletion reads no rows
    index.writes.refresh_indexes(fold_now=True)  # compaction rewrites every fragment: rows move, none is read again
    assert index.chunks().stats()["fragment_stats"]["num_fragments"] == 1
    index.reader.vector_search(probe, 5, None, COLUMNS)
    assert index.reader.replica_rows_read == 67
    assert index.reader._replica.rows.sort_by("id") == _fresh(tmp_path)
    assert index.reader._replica.rows.num_rows == 47
    theirs = _lancedb_nearest(index, probe, 47)
    assert [r["id"] for r in index.reader.vector_search(probe, 47, None, COLUMNS)] == [r["id"] for r in theirs]


def _keyword_hits(index: Index, terms: str, where: Filter | None, held: replica.Replica | None) -> list[tuple]:
    # a limit above every match: LanceDB returns all of them, so no tie at a cut can differ between two reads
    return [(r["id"], round(r["_score"], 5), r["text"], r["source_id"])
            for r in store_reads._bm25(index.chunks(), terms, 500, where, COLUMNS, held, deadline=None)]


def test_bm25_matches_come_from_the_replica_by_address_as_lancedb_reads_them(tmp_path: Path) -> None:
    rows = _rows(40, seed=14) + _rows(40, seed=15, source="/docs/b/c.md")
    for i, row in enumerate(rows):
        row["keywords"] = " ".join(["alpha"] * (1 + i % 5) + ["beta"] * (i % 3))
    index = _index(tmp_path, rows)
    index.writes.refresh_indexes()
    index.reader.vector_search(rows[0]["vector"], 1, None, COLUMNS)
    held = index.reader._replica
    def found() -> pa.Table:
        return (index.chunks().search("alpha", query_type="fts", fts_columns="keywords").select(["_score"])
                .with_row_id(True).limit(500).to_arrow())

    assert found().num_rows == 80 and held.rows_at_addresses(found(), COLUMNS) is not None  # served from memory
    for where in (None, Filter("/docs/b")):
        assert _keyword_hits(index, "alpha beta", where, held) == _keyword_hits(index, "alpha beta", where, None)
    # a row written and rows moved (compaction) since: the replica lacks their addresses, LanceDB reads them
    new = _rows(5, seed=16, source="/docs/new.md")
    for row in new:
        row["keywords"] = "alpha gamma"
    index.writes.replace_sources([store.SourceRow(source_id="/docs/new.md", source_kind="file", content_hash="h")], new)
    index.writes.refresh_indexes(fold_now=True)
    assert held.rows_at_addresses(found(), COLUMNS) is None
    assert _keyword_hits(index, "gamma", None, held) == _keyword_hits(index, "gamma", None, None)
    assert {hit[0] for hit in _keyword_hits(index, "gamma", None, held)} == {r["id"] for r in new}
    assert _keyword_hits(index, "alpha", None, held) == _keyword_hits(index, "alpha", None, None)
    # the refreshed replica holds the moved rows' addresses
    index.reader.vector_search(rows[0]["vector"], 1, None, COLUMNS)
    assert _keyword_hits(index, "alpha", Filter("/docs/new.md"), index.reader._replica) == \
        _keyword_hits(index, "alpha", Filter("/docs/new.md"), None)


def test_a_scope_mask_is_a_lookup_that_keeps_what_the_filter_keeps() -> None:
    """The sorted source ids are bisected: the same rows as Filter.keeps (and its SQL), at every boundary."""
    sources = ["/d", "/d/a.md", "/d/a.md/x", "/d!x", "/d-x/y", "/d0", "/d/ä/ö.md", "/d/日本.md", "/dz", "/c", "/"]
    n = 3 * len(sources)
    rows = pa.table({"id": [str(i) for i in range(n)], "source_id": sources * 3, "parent_id": ["p"] * n,
                     "doc_class": ["note", "pdf", None] * len(sources)})
    held = replica.Replica.of(1, rows, np.zeros((n, 2), dtype=np.float32))
    for prefix in (*sources, "/d/a", "/e", "/d/ä"):
        for where in (Filter(prefix), Filter(prefix, "note"), Filter(doc_class="pdf")):
            assert held.mask(where).tolist() == [where.keeps(r) for r in rows.to_pylist()], where


def test_a_large_scan_is_split_over_threads_with_the_same_bits() -> None:
    """Parts start at multiples of 64 rows: each similarity is summed as one whole call sums it."""
    rng = np.random.default_rng(17)
    for rows in (replica.SCAN_SPLIT_ROWS, replica.SCAN_SPLIT_ROWS + 3, 2 * replica.SCAN_SPLIT_ROWS + 61):
        matrix = rng.standard_normal((rows, 24)).astype(np.float32)
        for vector in rng.standard_normal((5, 24)).astype(np.float32):
            assert np.array_equal(replica._scan(matrix, vector), matrix @ vector)


def test_a_small_scan_leaves_blas_running_in_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below SCAN_SPLIT_ROWS a scan is one call, and single-threaded too: OpenBLAS's own threads spun beside
    BM25 and the embedding after every query's scan of a SciFact-sized index."""
    import ctypes

    libraries = sorted((Path(np.__file__).parent.parent / "numpy.libs").glob("libscipy_openblas*.so*"))
    if not libraries:
        pytest.skip("this numpy carries no scipy-openblas")
    blas = ctypes.CDLL(str(libraries[0]))
    blas.scipy_openblas_set_num_threads64_(2)  # as a fresh process starts on this machine
    monkeypatch.setattr(replica, "_scan_pool", None)
    monkeypatch.setattr(replica, "_blas_tried", False)
    matrix = np.random.default_rng(3).standard_normal((replica.SCAN_SPLIT_ROWS // 2, 24)).astype(np.float32)
    vector = np.ones(24, dtype=np.float32)
    try:
        assert np.array_equal(replica._scan(matrix, vector), matrix @ vector)
        assert blas.scipy_openblas_get_num_threads64_() == 1
    finally:
        blas.scipy_openblas_set_num_threads64_(1)


def test_a_passages_language_is_detected_once_and_again_after_its_row_changes(tmp_path: Path) -> None:
    """Rows that carry neither their stored language nor their text (the replica's ranked lists): the replica
    detects each row's once and keeps it through refreshes while the row is unchanged; without a replica the texts
    are read by id. Rows that carry their language give it, and rows that carry only their text are detected from
    it, with nothing read. Either way the answer is the detector's over the stored text."""
    asked: list[str] = []

    def detect(text: str) -> str | None:
        asked.append(text)
        return text.split()[-1] if text.endswith("de") or text.endswith("en") else None

    kept, changed = _rows(5, seed=21), _rows(4, seed=22, source="/docs/b.md")
    for i, row in enumerate(kept + changed):
        row["text"] = f"passage {i} en"
    index = _index(tmp_path, kept + changed)
    ids = [r["id"] for r in kept + changed] + ["/docs/gone.md:0"]
    bare = [{"id": i} for i in ids]
    expected = {r["id"]: "en" for r in kept + changed}
    assert index.reader.passage_languages(bare, detect) == expected
    assert index.reader.passage_languages(bare, detect) == expected
    assert len(asked) == 9  # each row once

    rewritten = [row | {"text": f"Absatz {i} de", "ingested_at": 2000.0} for i, row in enumerate(changed)]
    index.writes.replace_sources([store.SourceRow(source_id="/docs/b.md", source_kind="file", content_hash="h2")],
                                 rewritten)
    expected |= {r["id"]: "de" for r in rewritten}
    assert index.reader.passage_languages(bare, detect) == expected
    assert len(asked) == 13  # only the four rewritten rows again
    without_replica = Index(tmp_path, DIM, memory_budget=0)
    assert without_replica.reader.passage_languages(bare, detect) == expected
    assert index.reader.passage_languages([], detect) == {}

    asked.clear()
    carrying = [{"id": "x:0", "lang": "ru"}, {"id": "x:1", "lang": ""}, {"id": "x:2", "text": "Satz de"},
                {"id": "x:3", "lang": None, "text": "sentence en"}]
    assert without_replica.reader.passage_languages(carrying, detect) == {"x:0": "ru", "x:1": None, "x:2": "de",
                                                                          "x:3": "en"}
    assert asked == ["Satz de", "sentence en"]  # the stored languages are not detected again
