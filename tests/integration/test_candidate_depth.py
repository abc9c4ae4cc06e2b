"""Each side of a search reads CANDIDATES_PER_SIDE candidates (more when topK asks for more).

In a long manual the answering passage often ranked below the 40 candidates a side used to
read; scripts/passage_experiments.py measured 150 (README, "Retrieval quality")."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from appliance.search.hybrid import CANDIDATES_PER_SIDE, candidate_depth


def test_the_depth_is_the_floor_or_four_times_top_k() -> None:
    assert CANDIDATES_PER_SIDE == 150
    assert candidate_depth(10) == 150
    assert candidate_depth(100) == 400


def test_a_search_reads_that_many_candidates_on_each_side(tmp_path: Path, make_app: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(3):
        (docs / f"part{n}.md").write_text(f"# Part {n}\n\nThe pump {n} moves coolant through the engine.\n")
    app = make_app(docs)
    app.sync()
    limits: dict[str, list[int]] = {"vector": [], "keyword": []}
    index = app.index
    vector_side, keyword_side = index.reader.vector_side, index.reader.keyword_side

    def spy_vector(vector: Any, limit: int, *args: Any) -> Any:
        limits["vector"].append(limit)
        return vector_side(vector, limit, *args)

    def spy_keyword(terms: str, limit: int, *args: Any) -> Any:
        limits["keyword"].append(limit)
        return keyword_side(terms, limit, *args)

    monkeypatch.setattr(index.reader, "vector_side", spy_vector)
    monkeypatch.setattr(index.reader, "keyword_side", spy_keyword)
    hits = app.search("coolant pump", top_k=10).results
    assert {h.source for h in hits} == {str(docs / f"part{n}.md") for n in range(3)}
    assert limits == {"vector": [150], "keyword": [150]}
    app.search("coolant pump", top_k=60)
    assert limits["vector"][-1] == 240 and limits["keyword"][-1] == 240
