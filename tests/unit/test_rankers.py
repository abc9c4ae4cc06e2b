"""The ranker contract: the in-memory replica and LanceDB's vector search answer a vector side alike.

Every test runs against both rankers over one real LanceDB table written through the index's own
write path; the memory budget the index is given chooses which one serves (IndexReader.ranker).
Vectors come from the hash embedder: this checks plumbing (which rows, in which order, with which
distances and scale), not ranking quality, which the real model's tests measure.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from appliance.assemble.passages import RANK_COLUMNS
from appliance.config import replica_budget
from appliance.storage import replica
from appliance.storage.filters import Filter
from appliance.storage.index import Index
from appliance.storage.reads import LanceRanker, Ranker
from appliance.storage.sides import Side
from appliance.storage.tables import SourceRow, chunk_schema
from tests.fixtures.embedders import HashEmbedder

COLUMNS = [*RANK_COLUMNS, "text", "doc_class", "chunk_index"]
DOCUMENTS = {
    "/docs/a.md": ("note", ["the pump needs oil every spring", "oil the pump chain", "spring cleaning of the garden",
                            "garden hose and pump", "winter storage of the hose", "the chain guard of the pump",
                            "a note on oil grades", "storage shelf for oil cans"]),
    "/docs/b/c.md": ("manual", ["manual for the garden pump", "pump pressure and hose length", "oil change steps",
                                "chain tension of the pump", "the garden in winter", "spring start of the pump",
                                "hose fittings", "pressure valve of the pump", "pump oil level check"]),
    "/docs/b-other.md": ("note", ["other notes on the pump", "oil spill cleanup", "hose repair kit"]),
}
ROWS = sum(len(texts) for _, texts in DOCUMENTS.values())
QUERIES = ["pump oil", "garden hose", "chain of the pump", "winter storage", "pressure valve"]
KINDS = {"replica": replica.Replica, "lancedb": LanceRanker}


@pytest.fixture(scope="module")
def embedder() -> HashEmbedder:
    return HashEmbedder()


def _write(index: Index, embedder: HashEmbedder) -> None:
    for source_id, (doc_class, texts) in DOCUMENTS.items():
        vectors = embedder.embed_passages(texts)
        rows = [{f.name: None for f in chunk_schema(index.dim)} | {
            "id": f"{source_id}:{i}", "source_id": source_id, "source_kind": "data", "parent_id": f"{source_id}#{i}",
            "chunk_index": i, "text": text, "keywords": text, "doc_class": doc_class, "ingested_at": 1000.0,
            "also_unchanged_on": [], "vector": vector.tolist()}
            for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))]
        source = SourceRow(source_id=source_id, source_kind="data", doc_class=doc_class, chunk_count=len(rows))
        index.writes.replace_sources([source], rows)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, embedder: HashEmbedder) -> Path:
    db = tmp_path_factory.mktemp("rankers") / "index"
    _write(Index(db, embedder.spec.dim, memory_budget=replica_budget()), embedder)
    return db


def _index(db: Path, dim: int, kind: str) -> Index:
    """The index over `db` with the memory budget that makes `kind` serve: the replica's, or none."""
    return Index(db, dim, memory_budget=replica_budget() if kind == "replica" else 0)


@pytest.fixture(params=sorted(KINDS))
def ranker(request: pytest.FixtureRequest, written: Path, embedder: HashEmbedder) -> Ranker:
    chosen = _index(written, embedder.spec.dim, request.param).reader.ranker(COLUMNS)
    assert isinstance(chosen, KINDS[request.param])  # the budget chose it
    return chosen


def _exact(db: Path, dim: int, vector: np.ndarray) -> list[tuple[str, float]]:
    """Every chunk with its cosine distance to `vector`, nearest first, ties by id (numpy over the stored rows)."""
    stored = Index(db, dim, memory_budget=0).reader.chunk_rows("chunk_index >= 0", ["id", "vector"])
    query = vector / np.linalg.norm(vector)
    scored = [(r["id"], 1.0 - float(np.asarray(r["vector"]) / np.linalg.norm(r["vector"]) @ query)) for r in stored]
    return sorted(scored, key=lambda item: (round(item[1], 5), item[0]))


def _hits(side: Side) -> list[tuple[str, float]]:
    return [(row["id"], round(row["_distance"], 5)) for row in side.rows]


def test_an_exact_search_returns_the_nearest_chunks_with_their_distances(ranker: Ranker, written: Path,
                                                                          embedder: HashEmbedder) -> None:
    for query in QUERIES:
        vector = embedder.embed_query(query)
        side = ranker.rank(vector, 5, None, COLUMNS)
        exact = [(cid, round(d, 5)) for cid, d in _exact(written, embedder.spec.dim, vector)]
        assert _hits(side) == exact[:5]
        assert side.best == pytest.approx(1 - exact[0][1], abs=1e-5)  # the scale: the candidates' similarities
        assert side.floor == pytest.approx(1 - exact[4][1], abs=1e-5)
        for row in side.rows:  # the same hit records: the columns asked for, and the distance
            assert set(COLUMNS) | {"_distance"} <= set(row)
            assert row["text"] in DOCUMENTS[row["source_id"]][1]


def test_both_rankers_give_the_same_hits(written: Path, embedder: HashEmbedder) -> None:
    rankers = {kind: _index(written, embedder.spec.dim, kind).reader.ranker(COLUMNS) for kind in KINDS}
    for query in QUERIES:
        vector = embedder.embed_query(query)
        for where in (None, Filter("/docs/b"), Filter(doc_class="note"), Filter("/docs/a.md", "note")):
            sides = {kind: r.rank(vector, 6, where, COLUMNS) for kind, r in rankers.items() if r is not None}
            assert len(sides) == 2
            memory, lancedb = sides["replica"], sides["lancedb"]
            assert _hits(memory) == _hits(lancedb)
            for ours, theirs in zip(memory.rows, lancedb.rows, strict=True):
                assert {c: ours[c] for c in COLUMNS} == {c: theirs[c] for c in COLUMNS}
            assert (memory.best, memory.floor) == pytest.approx((lancedb.best, lancedb.floor), abs=1e-5)


@pytest.mark.parametrize("where", [Filter("/docs/b"), Filter(doc_class="manual"), Filter("/docs/b-other.md"),
                                   Filter("/docs", "note")], ids=["folder", "class", "file", "folder+class"])
def test_a_filter_keeps_the_nearest_chunks_inside_it_scaled_by_themselves(ranker: Ranker, where: Filter,
                                                                          embedder: HashEmbedder) -> None:
    for query in QUERIES:
        vector = embedder.embed_query(query)
        whole = ranker.rank(vector, ROWS, None, COLUMNS)
        inside = [hit for hit, row in zip(_hits(whole), whole.rows, strict=True) if where.keeps(row)]
        for k in (1, 3, 5):
            scoped = ranker.rank(vector, k, where, COLUMNS)
            assert _hits(scoped) == inside[:k]  # the same chunks in the same order, with their distances
            assert all(where.keeps(row) for row in scoped.rows)
            distances = [d for _, d in inside[:k]]  # the scale: the scope's own candidates, not the whole index's
            assert (scoped.best, scoped.floor) == pytest.approx((1 - distances[0], 1 - distances[-1]), abs=1e-5)


def test_a_scoped_search_finds_chunks_deeper_than_the_unscoped_top(ranker: Ranker, embedder: HashEmbedder) -> None:
    vector = embedder.embed_query("manual for the garden pump")
    scope = Filter("/docs/b-other.md")
    assert not any(scope.keeps(row) for row in ranker.rank(vector, 3, None, COLUMNS).rows)
    scoped = ranker.rank(vector, 3, scope, COLUMNS)
    assert sorted(row["id"] for row in scoped.rows) == [f"/docs/b-other.md:{i}" for i in range(3)]  # however deep


def test_k_larger_than_the_index_returns_every_row_once(ranker: Ranker, written: Path, embedder: HashEmbedder) -> None:
    vector = embedder.embed_query("pump oil")
    side = ranker.rank(vector, ROWS + 40, None, COLUMNS)
    assert _hits(side) == [(cid, round(d, 5)) for cid, d in _exact(written, embedder.spec.dim, vector)]
    assert len(ranker.rank(vector, ROWS + 40, Filter("/docs/b"), COLUMNS).rows) == len(DOCUMENTS["/docs/b/c.md"][1])


def test_a_filter_that_keeps_nothing_returns_nothing(ranker: Ranker, embedder: HashEmbedder) -> None:
    vector = embedder.embed_query("pump oil")
    for where in (Filter("/elsewhere"), Filter(doc_class="invoice"), Filter("/docs/b", "note")):
        side = ranker.rank(vector, 5, where, COLUMNS)
        assert side == Side([], 0.0, 0.0)  # nothing inside: no candidates, no scale


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_empty_index_ranks_nothing(tmp_path: Path, embedder: HashEmbedder, kind: str) -> None:
    index = _index(tmp_path / "index", embedder.spec.dim, kind)
    assert index.reader.ranker(COLUMNS) is None  # no table yet: the reader answers an empty side itself
    assert index.reader.vector_side(embedder.embed_query("pump"), 5, None, COLUMNS) == Side([], 0.0, 0.0)
    _write(index, embedder)
    index.writes.delete_sources(list(DOCUMENTS))  # a table whose every row is gone
    chosen = index.reader.ranker(COLUMNS)
    assert isinstance(chosen, replica.Replica)  # no rows fit any budget
    if kind == "lancedb":
        chosen = LanceRanker(index.chunks(create=True), index.deadline)
    for where in (None, Filter("/docs")):
        assert chosen.rank(embedder.embed_query("pump"), 5, where, COLUMNS) == Side([], 0.0, 0.0)


def test_the_resolved_settings_budget_chooses_the_ranker(written: Path, embedder: HashEmbedder) -> None:
    """The budget is resolved with the settings (from the memory limit) and passed to the index, not read
    by the storage modules: a process given none ranks through LanceDB."""
    from dataclasses import replace

    from appliance.config import load_settings
    from appliance.core import Resources

    settings = load_settings({"BASE_DIR": str(written.parent), "DB_PATH": str(written)})
    assert settings.replica_budget_bytes == replica_budget() > 0
    assert Resources(settings, embedder=embedder).index.memory_budget == settings.replica_budget_bytes
    assert isinstance(Resources(settings, embedder=embedder).index.reader.ranker(COLUMNS),
                      replica.Replica)
    starved = Resources(replace(settings, replica_budget_bytes=0), embedder=embedder)
    assert isinstance(starved.index.reader.ranker(COLUMNS), LanceRanker)


def test_an_index_that_outgrows_the_budget_switches_ranker_at_its_next_version(
        tmp_path: Path, embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranker is chosen again at each version: a budget that holds the first documents gives the replica,
    a write past it LanceDB (a table found too large is not counted again at every read of one version), a
    deletion back under it the replica again."""
    first = {k: DOCUMENTS[k] for k in ("/docs/a.md",)}
    budget = replica.estimated_bytes(len(first["/docs/a.md"][1]), embedder.spec.dim)
    index = Index(tmp_path / "index", embedder.spec.dim, memory_budget=budget)
    _write(index, embedder)  # every document: over the budget
    assert isinstance(index.reader.ranker(COLUMNS), LanceRanker)
    from lancedb.table import LanceTable

    counted: list[int] = []
    count_rows = LanceTable.count_rows
    monkeypatch.setattr(LanceTable, "count_rows", lambda self, *a, **k: counted.append(1) or count_rows(self, *a, **k))
    for _ in range(3):
        assert isinstance(index.reader.ranker(COLUMNS), LanceRanker)  # the same version: not counted again
    assert not counted
    index.writes.delete_sources(["/docs/b/c.md", "/docs/b-other.md"])
    chosen = index.reader.ranker(COLUMNS)
    assert isinstance(chosen, replica.Replica)
    rows = chosen.rank(embedder.embed_query("pump oil"), 3, None, COLUMNS).rows
    assert rows and all(r["id"].startswith("/docs/a.md:") for r in rows)


def test_similarities_use_carried_vectors_and_read_the_rest(written: Path, embedder: HashEmbedder) -> None:
    """Vectors a ranked list brought along (BM25's rows where LanceDB ranks) are not read again; the other ids
    are, and both give the cosine similarity the stored vectors give."""
    index = _index(written, embedder.spec.dim, "lancedb")
    query = embedder.embed_query("pump oil")
    ids = ["/docs/a.md:0", "/docs/b/c.md:1"]
    read = index.reader.similarities(query, ids)
    carried = {ids[0]: np.asarray(index.reader.chunk_rows(f"id = '{ids[0]}'", ["vector"])[0]["vector"]) * 3.0}
    mixed = index.reader.similarities(query, ids, carried)
    assert mixed == pytest.approx(read) and set(mixed) == set(ids)
    nothing = Index(written.parent / "nowhere", embedder.spec.dim, memory_budget=0)  # no table: only the carried
    assert nothing.reader.similarities(query, ids, carried) == pytest.approx({ids[0]: read[ids[0]]})


def test_bm25s_rows_carry_their_stored_vectors_and_languages_where_lancedb_ranks(written: Path,
                                                                                  embedder: HashEmbedder) -> None:
    """Where LanceDB ranks, the BM25 side's rows bring their vectors (as numpy rows, for fusion's tie-break) and
    their stored language (for fusion's judgement); a search matching nothing, or nothing inside a filter, is an
    empty side, never an error; and a filtered side is scaled by its own rows."""
    index = _index(written, embedder.spec.dim, "lancedb")
    reader = index.reader
    columns = [*reader.rank_columns(COLUMNS), "vector"]
    assert "lang" in columns
    stored = {r["id"]: np.asarray(r["vector"], dtype=np.float32)
              for r in reader.chunk_rows("chunk_index >= 0", ["id", "vector"])}
    side = reader.keyword_side("pump oil", 5, None, columns)
    assert side.rows
    for row in side.rows:
        assert isinstance(row["vector"], np.ndarray) and np.array_equal(row["vector"], stored[row["id"]])
        assert row["lang"] is not None
    assert reader.keyword_side("zorblatt", 5, None, columns) == Side([], 0.0, 0.0)
    assert reader.keyword_side("pump oil", 5, Filter("/elsewhere"), columns).rows == []
    scoped = reader.keyword_side("pump oil", 5, Filter("/docs/b"), columns)
    assert scoped.rows and all(r["source_id"].startswith("/docs/b/") for r in scoped.rows)
    scores = [r["_score"] for r in scoped.rows]  # scaled by its own rows, not the unfiltered ones
    assert (scoped.best, scoped.floor) == (scores[0], scores[-1]) != (side.best, side.floor)
