"""Score fusion, the language guess it relies on, and the result-shaping rules, on hand-made rankings."""
import pytest

from appliance.languages import language
from appliance.search import fusion as hybrid
from appliance.search.fusion import cap_distance, cap_files, group_cut
from appliance.storage.sides import Side

EN = "The cat sleeps most of the day and it is a quiet animal."
DE = "Die Katze schläft den größten Teil des Tages und ist ein ruhiges Tier."
RU = "Кошка спит большую часть дня и это спокойное животное."


def _v(i: str, d: float, src: str = "s", text: str = "") -> dict:
    return {"id": i, "_distance": d, "source_id": src, "text": text}


def _k(i: str, score: float = 1.0, src: str = "s", text: str = "") -> dict:
    return {"id": i, "_score": score, "source_id": src, "text": text}


def fuse(vector: list[dict], keyword: list[dict], weight: float, query_language: str | None = None):
    """Fusion of two full lists: each is scaled by its own candidates."""
    return hybrid.fuse(Side.of(vector, "_distance"), Side.of(keyword, "_score"), weight, query_language)


def test_convex_combination_of_min_max_normalised_scores() -> None:
    out = fuse([_v("a", 0.1), _v("b", 0.2), _v("c", 0.3)], [_k("b", 8.0), _k("d", 2.0)], 0.6)
    by_id = {c.id: c for c in out}
    # v: a 1.0, b 0.5, c 0.0; bm25: b 1.0, d 0.0
    assert by_id["a"].score == pytest.approx(0.4)
    assert by_id["b"].score == pytest.approx(0.4 * 0.5 + 0.6)
    assert by_id["c"].score == pytest.approx(0.0)
    assert by_id["d"].distance is None and by_id["d"].vector_rank is None and by_id["d"].keyword_rank == 1
    assert by_id["b"].vector_rank == 1 and by_id["b"].keyword_rank == 0
    assert [c.id for c in out] == ["b", "a", "c", "d"]  # ties go to the more similar chunk


def test_a_side_is_scaled_by_its_scale_not_by_the_rows_it_holds() -> None:
    """Fusion scales a side by its Side's best and floor (a translated list's: its best and 0), not by the rows
    handed with it: a chunk scores what that scale gives it, and one at or below the floor scores 0 there."""
    whole = fuse([_v("a", 0.1), _v("b", 0.2), _v("c", 0.3)], [_k("b", 8.0), _k("d", 2.0)], 0.6)
    vector = Side([_v("b", 0.2), _v("e", 0.5)], best=0.9, floor=0.7)
    keyword = Side([_k("b", 8.0), _k("f", 1.0)], best=8.0, floor=2.0)
    scoped = hybrid.fuse(vector, keyword, 0.6, similarity={"f": 0.45})
    assert [(c.id, c.score) for c in scoped] == [("b", pytest.approx({c.id: c.score for c in whole}["b"])),
                                                 ("e", 0.0), ("f", 0.0)]  # e and f tie: e is more similar
    assert [c.id for c in hybrid.fuse(vector, keyword, 0.6, similarity={"f": 0.55})] == ["b", "f", "e"]


def test_similarity_is_read_only_for_keyword_hits_that_tie() -> None:
    """Outside the in-memory replica each read of similarities is another read of vectors: the callable is
    asked only for chunks only BM25 found whose score ties another's, and the order is what a full map gives."""
    vector = Side([_v("b", 0.2), _v("e", 0.5)], best=0.9, floor=0.7)
    keyword = Side([_k("b", 8.0), _k("f", 1.0), _k("g", 5.0)], best=8.0, floor=2.0)
    asked: list[list[str]] = []

    def similarity(ids):  # type: ignore[no-untyped-def]
        asked.append(list(ids))
        return {"f": 0.55, "g": 0.1}

    lazy = hybrid.fuse(vector, keyword, 0.6, similarity=similarity)
    full = hybrid.fuse(vector, keyword, 0.6, similarity={"f": 0.55, "g": 0.1})
    assert [c.id for c in lazy] == [c.id for c in full] == ["b", "g", "f", "e"]
    assert asked == [["f"]]  # g's score is its own; f ties e at 0


def test_single_hit_lists_normalise_to_one() -> None:
    out = fuse([_v("a", 0.4)], [_k("z", 3.0)], 0.7)
    assert [c.id for c in out] == ["z", "a"]
    assert out[0].score == pytest.approx(0.7) and out[1].score == pytest.approx(0.3)


def test_weight_zero_is_vector_order_and_one_is_keyword_order() -> None:
    vec = [_v("a", 0.1), _v("b", 0.2), _v("c", 0.3)]
    kw = [_k("c", 3.0), _k("b", 2.0), _k("a", 1.0)]
    assert [c.id for c in fuse(vec, kw, 0.0)] == ["a", "b", "c"]
    assert [c.id for c in fuse(vec, kw, 1.0)] == ["c", "b", "a"]
    assert [c.id for c in fuse(vec, kw, 1.0, "en")] == ["c", "b", "a"]


def test_bm25_abstains_on_passages_in_another_language() -> None:
    # An English question: BM25 finds the English answer and an English passage sharing a word;
    # the German and Russian answers share no word with it, so BM25 has no opinion on them.
    vec = [_v("en-answer", 0.10, text=EN), _v("en-other", 0.12, text=EN), _v("de-answer", 0.14, text=DE),
           _v("ru-answer", 0.15, text=RU), _v("far", 0.30, text=EN)]
    kw = [_k("en-answer", 9.0, text=EN), _k("en-other", 3.0, text=EN), _k("far", 1.0, text=EN)]
    plain = [c.id for c in fuse(vec, kw, 0.5)]
    assert plain.index("en-other") < plain.index("de-answer")
    gated = fuse(vec, kw, 0.5, "en")
    assert [c.id for c in gated][:4] == ["en-answer", "de-answer", "ru-answer", "en-other"]
    assert {c.id: c.score for c in gated}["de-answer"] == pytest.approx(1 - 0.04 / 0.20)  # its vector score alone


def test_translations_judge_other_languages_and_leave_the_own_scale_alone() -> None:
    # A German question: its own BM25 list judges German passages, the list of its words' translations
    # (scaled by its best alone) judges the others; a passage that list misses scores 0 on that side.
    vec = [_v("de-near", 0.10, text=DE), _v("en-answer", 0.14, text=EN), _v("en-other", 0.12, text=EN),
           _v("far", 0.30, text=DE)]
    kw = [_k("de-near", 4.0, text=DE), _k("far", 1.0, text=DE)]
    words = Side([_k("en-answer", 6.0, text=EN), _k("de-near", 5.0, text=DE), _k("en-deep", 3.0, text=EN)],
                 best=6.0, floor=0.0)
    plain = {c.id: c for c in fuse(vec, kw, 0.5, "de")}
    out = hybrid.fuse(Side.of(vec, "_distance"), Side.of(kw, "_score"), 0.5, "de", None, words)
    by_id = {c.id: c for c in out}
    share = 0.5 * hybrid.TRANSLATED_SHARE
    assert by_id["de-near"].score == pytest.approx(plain["de-near"].score)  # own language: as without
    assert by_id["far"].score == pytest.approx(plain["far"].score)
    assert by_id["en-answer"].score == pytest.approx((1 - share) * (1 - 0.04 / 0.20) + share * 1.0)
    assert by_id["en-other"].score == pytest.approx((1 - share) * (1 - 0.02 / 0.20))  # missed: 0 there
    assert by_id["en-deep"].score == pytest.approx(share * 0.5) and by_id["en-deep"].keyword_rank == 2
    assert [c.id for c in out][:3] == ["de-near", "en-answer", "en-other"]
    assert [c.id for c in fuse(vec, kw, 0.5, "de")][:3] == ["de-near", "en-other", "en-answer"]  # untranslated
    unknown = hybrid.fuse(Side.of(vec, "_distance"), Side.of(kw, "_score"), 0.5, None, None, words)
    assert "en-deep" not in {c.id for c in unknown}  # no question language: nothing to translate from


def test_passages_of_unknown_language_are_judged_by_bm25() -> None:
    vec = [_v("a", 0.1, text="ERR_ZORBLATT_7741 4711"), _v("b", 0.2, text=DE)]
    assert fuse(vec, [_k("b", 1.0, text=DE)], 0.5, "en")[0].id == "a"  # b is German: vector alone, 0.0
    assert fuse(vec, [_k("a", 1.0)], 0.5, "en")[0].id == "a"


def test_language_guess() -> None:
    assert (language(EN), language(DE), language(RU)) == ("en", "de", "ru")
    assert language("How many points did the Panthers defense surrender?") == "en"
    assert language("Wie viele Punkte hat die Verteidigung abgegeben?") == "de"
    assert language("Сколько очков пропустила защита?") == "ru"
    for unclear in ("ERR_ZORBLATT_7741", "Kaffeemaschine entkalken Essig", "", "x", "แมวนอนหลับ", "in so"):
        assert language(unclear) is None, unclear


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
