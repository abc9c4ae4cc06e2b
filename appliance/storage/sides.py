"""One side of a ranking as a ranker returns it: the candidates inside the filter and the scale they are fused by.

Both rankers (the replica and LanceDB's search) and the keyword side return a Side; fusion
(appliance.search.fusion) reads it. It lives with the readers so storage needs nothing of search.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Side:
    """One side's candidates inside the filter (best first, raw values), and the best and the worst raw value
    it is scaled by: the candidates' own (Side.of), or for a translated list its best alone (search.hybrid)."""

    rows: Sequence[dict[str, Any]]
    best: float
    floor: float

    @classmethod
    def of(cls, rows: Sequence[dict[str, Any]], key: str) -> Side:
        """A side scaled by its own candidates, `rows`: the best of them 1, the worst 0."""
        values = [raw(row, key) for row in rows]
        return cls(rows, max(values, default=0.0), min(values, default=0.0))

    def scaled(self, value: float) -> float:
        """`value` on 0..1 by the side's scale; below its worst, 0 (as if absent)."""
        if self.best <= self.floor:
            return 1.0 if value >= self.floor else 0.0
        return min(1.0, max(0.0, (value - self.floor) / (self.best - self.floor)))


def raw(row: dict[str, Any], key: str) -> float:
    """A row's raw value: cosine similarity for `_distance`, the BM25 score for `_score`."""
    return 1.0 - float(row[key]) if key == "_distance" else float(row[key])
