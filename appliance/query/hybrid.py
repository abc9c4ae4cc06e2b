"""Hybrid fusion of the vector and the BM25 ranking, and the result-shaping rules (pure functions).

Fusion is a convex combination of the two sides' scores, each min-max normalised
over its own candidate list for this query: `(1 - w) * v + w * b`, with v the
cosine similarity and b the BM25 score scaled onto 0..1 (1 = the side's best hit,
0 = its worst or absent). BM25 cannot compare a passage in another language than
the query's: it shares no words with it, so an absent or low BM25 score says
nothing there. For such a passage BM25 abstains and the vector score stands
alone, instead of sinking it below every same-language passage that shares a
word with the question. Chosen over weighted RRF and other rules by
scripts/fusion_experiments.py (README, "Retrieval quality").
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from appliance.keywords import language


@dataclass(frozen=True)
class Candidate:
    """One chunk as ranked by either side; `distance` is None when only BM25 found it."""

    id: str
    row: dict[str, Any]
    distance: float | None = None
    vector_rank: int | None = None
    keyword_rank: int | None = None
    score: float = 0.0


def _minmax(values: Sequence[float]) -> list[float]:
    lo, hi = min(values, default=0.0), max(values, default=0.0)
    return [(x - lo) / (hi - lo) if hi > lo else 1.0 for x in values]


def fuse(vector_rows: Sequence[dict[str, Any]], keyword_rows: Sequence[dict[str, Any]],
         weight: float, query_language: str | None = None) -> list[Candidate]:
    """score = (1 - w) * v + w * b (see the module docstring); rows carry `_distance` / `_score`.

    When `query_language` is given and a row's `text` is clearly in another language
    (keywords.language), its score is v alone. w = 0 is the vector order, w = 1 the
    keyword order (no abstaining there). Ties keep the vector side's order, then the keyword side's.
    """
    sims = _minmax([1.0 - float(r["_distance"]) for r in vector_rows])
    bm25 = _minmax([float(r["_score"]) for r in keyword_rows])
    merged: dict[str, Candidate] = {}
    for rank, (row, v) in enumerate(zip(vector_rows, sims, strict=True)):
        merged[row["id"]] = Candidate(row["id"], row, float(row["_distance"]), rank, None, v)
    keyword_ranks = {row["id"]: (rank, row, b) for rank, (row, b) in enumerate(zip(keyword_rows, bm25, strict=True))}
    for cid, (rank, row, _) in keyword_ranks.items():
        if cid not in merged:
            merged[cid] = Candidate(cid, row, None, None, rank, 0.0)
    abstain = query_language is not None and weight < 1.0
    fused = []
    for c in merged.values():
        keyword_rank, _, b = keyword_ranks.get(c.id, (None, None, 0.0))
        other = abstain and (lang := language(c.row.get("text") or "")) is not None and lang != query_language
        fused.append(Candidate(c.id, c.row, c.distance, c.vector_rank, keyword_rank,
                               c.score if other else (1.0 - weight) * c.score + weight * b))
    order = {c.id: i for i, c in enumerate(merged.values())}
    return sorted(fused, key=lambda c: (-c.score, order[c.id]))


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
