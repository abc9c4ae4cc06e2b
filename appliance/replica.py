"""An in-memory replica of a small index, for the two reads every query makes.

Up to a few tens of thousands of chunks, one matrix-vector product over every
vector takes about a millisecond, where a query through LanceDB's vector index
costs 15-20 ms of planning and I/O and returns approximate neighbours where this
returns the exact ones; and the rows of the hits' sections come out of an Arrow
table by position instead of a filtered scan. The replica belongs to one table
version; the index rebuilds it when a commit moves the version on.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

MAX_ROWS = 50_000
"""Rows kept in memory at most: 75 MB of float32 vectors at 384 dimensions plus the
chunks' text. Larger indexes are read through LanceDB's indexes."""
LEFT_OUT = ("vector", "keywords", "metadata")
"""Columns the replica's rows do not carry (queries read neither)."""


@dataclass(frozen=True)
class Replica:
    version: int
    rows: pa.Table  # every column but LEFT_OUT
    matrix: np.ndarray  # (rows, dim) float32, each row scaled to unit length
    by_parent: dict[str, list[int]]

    @classmethod
    def from_arrow(cls, version: int, table: pa.Table) -> Replica:
        vectors = table.column("vector").combine_chunks()
        dim = vectors.type.list_size
        matrix = np.asarray(vectors.flatten().to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, dim)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = np.ascontiguousarray(matrix / np.where(norms > 0, norms, 1.0))
        rows = table.drop_columns([c for c in LEFT_OUT if c in table.column_names]).combine_chunks()
        by_parent: dict[str, list[int]] = {}
        for i, parent in enumerate(rows.column("parent_id").to_pylist()):
            by_parent.setdefault(parent, []).append(i)
        return cls(version, rows, matrix, by_parent)

    def serves(self, columns: Sequence[str]) -> bool:
        return all(c in self.rows.column_names for c in columns)

    def nearest(self, vector: Sequence[float] | np.ndarray, limit: int, columns: Sequence[str]) -> list[dict[str, Any]]:
        """The `limit` nearest rows by cosine distance, nearest first (ties in row order), with `_distance`."""
        if limit < 1 or not len(self.matrix):
            return []
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        distances = 1.0 - self.matrix @ (query / norm if norm > 0 else query)
        top = np.argpartition(distances, limit - 1)[:limit] if limit < len(distances) else np.arange(len(distances))
        top = top[np.lexsort((top, distances[top]))]
        out: list[dict[str, Any]] = self.rows.select(list(columns)).take(pa.array(top)).to_pylist()
        for row, i in zip(out, top, strict=True):
            row["_distance"] = float(distances[i])
        return out

    def in_sections(self, parent_ids: Sequence[str], columns: Sequence[str]) -> list[dict[str, Any]]:
        """Every row whose parent_id is one of `parent_ids`."""
        positions = sorted(i for p in set(parent_ids) for i in self.by_parent.get(p, ()))
        rows: list[dict[str, Any]] = self.rows.select(list(columns)).take(pa.array(positions, pa.int64())).to_pylist()
        return rows
