"""Weighted RRF and the result-shaping rules, on hand-made rankings."""
from appliance.query.hybrid import RRF_K, cap_distance, cap_files, fuse, group_cut


def _v(i: str, d: float, src: str = "s") -> dict:
    return {"id": i, "_distance": d, "source_id": src}


def _k(i: str, src: str = "s") -> dict:
    return {"id": i, "_score": 1.0, "source_id": src}


def test_rrf_formula_and_keyword_only_hits_have_no_distance() -> None:
    out = fuse([_v("a", 0.1), _v("b", 0.2)], [_k("b"), _k("c")], 0.6)
    by_id = {c.id: c for c in out}
    assert abs(by_id["a"].score - 0.4 / (RRF_K + 1)) < 1e-12
    assert abs(by_id["b"].score - (0.4 / (RRF_K + 2) + 0.6 / (RRF_K + 1))) < 1e-12
    assert by_id["c"].distance is None and by_id["c"].vector_rank is None
    assert [c.id for c in out][0] == "b"


def test_weight_zero_is_vector_order_and_one_is_keyword_order() -> None:
    vec = [_v("a", 0.1), _v("b", 0.2), _v("c", 0.3)]
    kw = [_k("c"), _k("b"), _k("a")]
    assert [c.id for c in fuse(vec, kw, 0.0)] == ["a", "b", "c"]
    assert [c.id for c in fuse(vec, kw, 1.0)] == ["c", "b", "a"]


def test_grouping_cuts_at_a_large_gap_and_keeps_distanceless_hits() -> None:
    rows = [_v("a", 0.10), _v("b", 0.11), _v("c", 0.12), _v("d", 0.40), _v("e", 0.41)]
    fused = fuse(rows, [_k("z")], 0.5)
    similar = [c.id for c in group_cut(fused, "similar")]
    assert set(similar) == {"a", "b", "c", "z"}
    assert [c.id for c in group_cut(fused, None)] == [c.id for c in fused]


def test_grouping_needs_three_distances() -> None:
    fused = fuse([_v("a", 0.1), _v("b", 0.9)], [], 0.5)
    assert len(group_cut(fused, "similar")) == 2


def test_max_distance_drops_far_and_distanceless_hits() -> None:
    fused = fuse([_v("a", 0.1), _v("b", 0.5)], [_k("c")], 0.5)
    assert [c.id for c in cap_distance(fused, 0.3)] == ["a"]


def test_max_files_keeps_first_sources_in_rank_order() -> None:
    fused = fuse([_v("a", 0.1, "x"), _v("b", 0.2, "y"), _v("c", 0.3, "x"), _v("d", 0.4, "z")], [], 0.0)
    assert [c.id for c in cap_files(fused, 2)] == ["a", "b", "c"]
