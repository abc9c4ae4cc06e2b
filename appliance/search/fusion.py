"""Hybrid fusion of the vector and the BM25 ranking, and the result-shaping rules (pure functions).

Fusion is a convex combination of the two sides' scores, each min-max normalised
over that side's candidate list for this query: `(1 - w) * v + w * b`,
with v the cosine similarity and b the BM25 score scaled onto 0..1 (1 = the side's
best hit, 0 = its worst or absent). Under a scope or doc-class filter the candidates are
the best chunks inside it, and they are the scale: a scoped search ranks its chunks as
the whole index ranks its own (BM25's statistics stay the whole index's). On five sets
scoped to one folder in ten this ranked as well as the whole index's scale or better
(nDCG@10 Cranfield 0.635 against 0.619, SciFact 0.858 against 0.857, XQuAD-R within
0.004 near 0.99) and spared each filtered side a second, unfiltered search
(scripts/eval_scoped.py; docs/DESIGN.md, "Filters choose the candidates").

BM25 cannot compare a passage in another language than the query's: it shares no
words with it, so an absent or low BM25 score says nothing there. For such a passage
BM25 abstains and the vector score stands alone, instead of sinking it below every
same-language passage that shares a word with the question. Chosen over weighted RRF and other rules by
scripts/fusion_experiments.py (README, "Retrieval quality").

When the question's words have dictionary translations (appliance.search.crosslingual), a second
BM25 list of the translations alone speaks for the passages in other languages instead. It is
searched among those passages only (their stored language; storage.reads.other_languages), and
scaled on its own (b / its best there, so a weak translated match is not stretched to 1 as min-max
would, nor shrunk by same-language passages whose words happen to spell a translation), and weighed
as the word itself (TRANSLATED_SHARE). The question's own BM25 list
still never judges another language, so its scale is untouched by translated matches.
"""
from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.languages import language
from appliance.storage.sides import Side, raw

TRANSLATED_SHARE = 1.0
"""A translated match's weight beside an own-language one: a translation counts as the word. On our
manuals 0.7 / 0.8 / 0.9 / 1.0 gave cross-lingual answer-passage hit@5 0.42 / 0.52 / 0.55 / 0.58 and
same-language 0.89 / 0.89 / 0.89 / 0.86; on XQuAD-R multi 1.0 took nDCG@10 from 0.791 to 0.849
(scripts/passage_experiments.py, scripts/eval_retrieval.py; README "Cross-language keyword search")."""


Similarity = Mapping[str, float] | Callable[[Sequence[str]], Mapping[str, float]]
"""Cosine similarity to the query by chunk id, or what reads it for the ids asked."""
Languages = Callable[[Sequence[Mapping[str, Any]]], Mapping[str, str | None]]
"""The language of each candidate's passage by id, from the candidates' rows (IndexReader.passage_languages: the
one stored with a row, or read in its text, the replica's or the text read by id)."""


@dataclass(frozen=True)
class Candidate:
    """One chunk as ranked by either side; `distance` is None when only BM25 found it."""

    id: str
    row: dict[str, Any]
    """The ranking row (assemble.RANK_COLUMNS and `_distance` or `_score`); a hit after ranking is a RankedChunk."""
    distance: float | None = None
    vector_rank: int | None = None
    keyword_rank: int | None = None
    score: float = 0.0


def fuse(vector: Side, keyword: Side, weight: float, query_language: str | None = None,
         similarity: Similarity | None = None, translated: Side | None = None,
         languages: Languages | None = None) -> list[Candidate]:
    """score = (1 - w) * v + w * b (see the module docstring), each side scaled by its Side.

    Each side is scaled by its Side (the candidates it returned, inside the filter). A
    chunk found by one side only scores 0 on the other: it lies below that side's
    candidates, the best ones inside the same filter.
    When `query_language` is given and a passage is clearly in another language
    (languages.language of its text: `languages` gives them from the candidates' rows, asked once
    for all of them; without it each row's `text` is read), its score is v alone. w = 0 is the
    vector order, w = 1 the keyword order (no abstaining there). Ties go to the more similar chunk (`similarity`
    by id, for chunks only BM25 found; the vector side's own value otherwise), then by id. A callable
    `similarity` is asked only for the chunks only BM25 found that tie with another candidate: outside the
    in-memory replica each ask is one more read of vectors, and ties are rare.
    """
    merged: dict[str, Candidate] = {}
    for rank, row in enumerate(vector.rows):
        merged[row["id"]] = Candidate(row["id"], row, float(row["_distance"]), rank, None,
                                      vector.scaled(raw(row, "_distance")))
    keyword_ranks = {row["id"]: (rank, keyword.scaled(raw(row, "_score"))) for rank, row in enumerate(keyword.rows)}
    for rank, row in enumerate(keyword.rows):
        if row["id"] not in merged:
            merged[row["id"]] = Candidate(row["id"], row, None, None, rank, 0.0)
    abstain = query_language is not None and weight < 1.0
    if not abstain:
        translated = None
    foreign = _foreign(merged, translated, query_language, languages) if abstain else set()
    translated_ranks: dict[str, tuple[int, float]] = {}
    for rank, row in enumerate(translated.rows if translated is not None else ()):
        if translated is not None and row["id"] in foreign:
            translated_ranks[row["id"]] = (rank, translated.scaled(raw(row, "_score")))
            merged.setdefault(row["id"], Candidate(row["id"], row, None, None, rank, 0.0))
    share = weight * TRANSLATED_SHARE
    fused: list[Candidate] = []
    for c in merged.values():
        if c.id not in foreign:
            keyword_rank, b = keyword_ranks.get(c.id, (None, 0.0))
            score = (1.0 - weight) * c.score + weight * b
        elif translated is not None:
            keyword_rank, t = translated_ranks.get(c.id, (None, 0.0))
            score = (1.0 - share) * c.score + share * t
        else:
            keyword_rank, score = keyword_ranks.get(c.id, (None, 0.0))[0], c.score
        fused.append(Candidate(c.id, c.row, c.distance, c.vector_rank, keyword_rank, score))
    sims = {c.id: 1.0 - c.distance if c.distance is not None else float("-inf") for c in fused}
    if similarity is not None:
        counts = Counter(c.score for c in fused)
        tied = sorted(c.id for c in fused if c.distance is None and counts[c.score] > 1)
        known = similarity(tied) if callable(similarity) else similarity
        sims.update({cid: known[cid] for cid in tied if cid in known})
    return sorted(fused, key=lambda c: (-c.score, -sims[c.id], c.id))


def _foreign(merged: Mapping[str, Candidate], translated: Side | None, query_language: str | None,
             languages: Languages | None) -> set[str]:
    """The ids of the candidates (of either side or the translated list) whose passage is clearly in another
    language than `query_language`."""
    rows = {**{row["id"]: row for row in (translated.rows if translated is not None else ())},
            **{cid: c.row for cid, c in merged.items()}}
    known = languages([rows[cid] for cid in sorted(rows)]) if languages is not None else \
        {cid: language(row.get("text") or "") for cid, row in rows.items()}
    return {cid for cid in rows if (lang := known.get(cid)) is not None and lang != query_language}


def group_cut(candidates: Sequence[Candidate], mode: str | None) -> list[Candidate]:
    """Keep the first (`similar`) or first two (`related`) relevance groups.

    A boundary is a gap between consecutive distances (sorted ascending) larger
    than twice the mean gap; at least three distances are needed. Hits without
    a distance are always kept, and the fused order is preserved.
    """
    if mode not in ("similar", "related"):
        return list(candidates)
    distances = sorted(c.distance for c in candidates if c.distance is not None)
    if len(distances) < 3:
        return list(candidates)
    gaps = [b - a for a, b in itertools.pairwise(distances)]
    mean_gap = sum(gaps) / len(gaps)
    boundaries = [distances[i] for i, g in enumerate(gaps) if mean_gap > 0 and g > 2 * mean_gap]
    groups = 1 if mode == "similar" else 2
    if len(boundaries) < groups:
        return list(candidates)
    limit = boundaries[groups - 1]
    return [c for c in candidates if c.distance is None or c.distance <= limit]


def cap_distance(candidates: Sequence[Candidate], max_distance: float | None) -> list[Candidate]:
    """Drop hits farther than `max_distance`, and hits with no distance at all."""
    if max_distance is None:
        return list(candidates)
    return [c for c in candidates if c.distance is not None and c.distance <= max_distance]


def cap_files(candidates: Sequence[Candidate], max_files: int | None) -> list[Candidate]:
    """Keep chunks from only the first `max_files` distinct sources, in rank order."""
    if max_files is None:
        return list(candidates)
    seen: list[str] = []
    kept = []
    for c in candidates:
        source = c.row["source_id"]
        if source not in seen:
            if len(seen) >= max_files:
                continue
            seen.append(source)
        kept.append(c)
    return kept
