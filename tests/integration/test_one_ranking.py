"""A scope or doc class chooses the chunks one rule ranks (real model, real LanceDB).

Whether the in-memory replica or LanceDB answers (above the replica's memory budget), a scoped search
finds the best chunks inside the scope, however deep, and fuses them as the whole index's are fused,
each side scaled by its own candidates inside the scope: a scope holding every chunk changes nothing,
the vector side alone keeps the whole index's order inside the scope, and a scope holding few of the
top hits finds deeper ones.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from appliance.storage import replica
from tests.conftest import app_factory, shared_path

pytestmark = [pytest.mark.model, pytest.mark.shared]

QUERIES = ["Vitamin D deficiency and the risk of fractures", "stem cells differentiate into neurons",
           "antibiotic resistance in hospital bacteria", "obesity increases the risk of diabetes"]
TOP_K = 5


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, real_embedder) -> SimpleNamespace:  # type: ignore[no-untyped-def]
    """40 SciFact abstracts, alternately in docs/a and docs/b, synced once."""
    root = tmp_path_factory.mktemp("ranking")
    docs = root / "docs"
    with (shared_path() / "eval/retrieval/scifact/corpus.jsonl").open(encoding="utf-8") as lines:
        for n, line in enumerate(itertools.islice(lines, 40)):
            doc = json.loads(line)
            folder = docs / ("a" if n % 2 == 0 else "b")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{doc['_id']}.md").write_text(f"# {doc['title']}\n\n{doc['text']}\n", "utf-8")
    build = app_factory(root, models_dir, real_embedder)
    app = build(docs)
    app.sync()
    return SimpleNamespace(docs=docs, app=app, vector_alone=build(docs, RAG_HYBRID_WEIGHT="0.0"))


def _hits(app, query: str, scope: str | None = None) -> list[tuple[str, float]]:  # type: ignore[no-untyped-def]
    return [(f"{h.source}#{h.chunk_index}", h.score) for h in app.search(query, top_k=TOP_K, scope=scope).results]


def _check_one_ranking(synced: SimpleNamespace) -> int:
    """Every property for every query; returns how many scoped queries had to go deeper than the hits."""
    deeper = 0
    for query in QUERIES:
        whole = _hits(synced.app, query)
        assert len(whole) == TOP_K
        assert _hits(synced.app, query, str(synced.docs)) == whole  # every chunk inside: the same hits and scores
        for folder in ("a", "b"):
            scope = synced.docs / folder
            scoped = _hits(synced.app, query, str(scope))
            assert all(f"/{folder}/" in cid for cid, _ in scoped) and len(scoped) == TOP_K
            assert [s for _, s in scoped] == sorted((s for _, s in scoped), reverse=True)
            deeper += len([cid for cid, _ in whole if f"/{folder}/" in cid]) < TOP_K
            # the vector side alone: its order inside the scope is the whole index's
            inside = [cid for cid, _ in _hits(synced.vector_alone, query) if f"/{folder}/" in cid]
            assert [cid for cid, _ in _hits(synced.vector_alone, query, str(scope))][:len(inside)] == inside
    return deeper


def test_a_scope_is_ranked_by_the_one_rule(synced: SimpleNamespace) -> None:
    index = synced.app.index
    assert replica.fits(index.registry.count_chunks(), index.dim, index.memory_budget)
    assert synced.app.status().index.query_path == "memory"
    assert _check_one_ranking(synced) > 0  # some scope held fewer than all hits: deeper ones were found
    assert synced.app.index.reader._replica is not None


def test_above_the_replica_limit_lancedb_ranks_the_same(synced: SimpleNamespace, monkeypatch) -> None:
    in_memory = {query: _hits(synced.app, query, str(synced.docs / "b")) for query in QUERIES}
    apps = [synced.app, synced.vector_alone]
    for app in apps:
        monkeypatch.setattr(app.index, "memory_budget", replica.estimated_bytes(10, app.index.dim))
        app.index.reader._replica = None
        assert app.status().index.query_path == "index"  # the same process switches, no restart
    assert _check_one_ranking(synced) > 0
    assert all(app.index.reader._replica is None for app in apps)
    for query, hits in in_memory.items():
        through_lancedb = _hits(synced.app, query, str(synced.docs / "b"))
        assert [cid for cid, _ in through_lancedb] == [cid for cid, _ in hits]
        assert [s for _, s in through_lancedb] == pytest.approx([s for _, s in hits], abs=1e-4)
