"""Weighted Reciprocal Rank Fusion and the result-shaping rules (pure functions)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

RRF_K = 60


@dataclass(frozen=True)
class Candidate:
    """One chunk as ranked by either side; `distance` is None when only BM25 found it."""

    id: str
    row: dict[str, Any]
    distance: float | None = None
    vector_rank: int | None = None
    keyword_rank: int | None = None
    score: float = 0.0


def fuse(vector_rows: Sequence[dict[str, Any]], keyword_rows: Sequence[dict[str, Any]],
         weight: float, k: int = RRF_K) -> list[Candidate]:
    """score = (1 - w) / (k + vector_rank + 1) + w / (k + keyword_rank + 1), ranks from 0.

    Ties keep the vector side's order, then the keyword side's.
    """
    merged: dict[str, Candidate] = {}
    for rank, row in enumerate(vector_rows):
        merged[row["id"]] = Candidate(row["id"], row, float(row["_distance"]), rank, None,
                                      (1.0 - weight) / (k + rank + 1))
    for rank, row in enumerate(keyword_rows):
        part = weight / (k + rank + 1)
        found = merged.get(row["id"])
        if found is None:
            merged[row["id"]] = Candidate(row["id"], row, None, None, rank, part)
        else:
            merged[row["id"]] = replace(found, keyword_rank=rank, score=found.score + part)
    order = {cid: i for i, cid in enumerate(merged)}
    return sorted(merged.values(), key=lambda c: (-c.score, order[c.id]))


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
    gaps = [b - a for a, b in zip(distances, distances[1:])]
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
