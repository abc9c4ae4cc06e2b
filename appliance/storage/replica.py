"""An in-memory replica of a small index: exact vector ranking and section reads without LanceDB.

As many chunks as fit its memory budget (config.replica_budget: ~150,000 at 384 dimensions), one
matrix-vector product over every vector takes ~5 ms per 30,000 chunks on this 2-core machine
(16 ms at 100,000), where a query through LanceDB's vector index costs 12-20 ms of planning
and I/O and returns approximate neighbours where this returns the exact ones; and the rows
of the hits' sections come out of an Arrow table by position instead of a filtered scan. A
filter (storage.filters) is a mask over the same similarities, so a scoped query finds exactly
the chunks nearest inside it.

The replica belongs to one table version. When a commit moves the version on, it is
refreshed, not rebuilt: the index reads the narrow key columns (id, ingested_at) of
every row, keeps the rows whose key it holds (also when compaction moved them) and
reads in full only the rows it does not hold. A row's key changes whenever its
content can: every write of a chunk stamps the ingestion time of its source.
"""
from __future__ import annotations

import ctypes
import itertools
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from appliance.storage.filters import Filter
from appliance.storage.sides import Side

ROW_BYTES_BESIDE_VECTOR = 5_632
"""What a chunk costs the replica beside its vector: its text and columns in the Arrow table, the
lookup dicts and what the allocator keeps (scripts/bench_scale.py: serving RSS 805 MB through
LanceDB and 1,517 MB from the replica at 100,000 chunks, 7.1 KB a chunk with its 1.5 KB vector)."""


def estimated_bytes(rows: int, dim: int) -> int:
    """What a replica of `rows` rows would take: the unit-length float32 matrix plus the rest of a row."""
    return rows * (dim * 4 + ROW_BYTES_BESIDE_VECTOR)


def fits(rows: int, dim: int, memory_budget: int) -> bool:
    """Whether an index of `rows` rows is served from memory: a process may hold `memory_budget` bytes of it
    (Settings.replica_budget_bytes); a larger one is read through LanceDB's indexes."""
    return estimated_bytes(rows, dim) <= memory_budget


LEFT_OUT = ("vector", "keywords", "metadata")
"""Columns the replica's rows do not carry (queries read neither)."""
KEY_COLUMNS = ["id", "ingested_at"]
"""What identifies a row's content: a row with a held key is reused, any other read in full."""
ROW_ID = "_rowid"
UNREAD = ""
"""A row's passage language before it was first asked (a detector answers a language code or None, never "")."""


SCAN_THREADS = 2
"""Parts one scan (the matrix-vector product) is cut into, each a single-threaded BLAS call in a thread of
its own. OpenBLAS's own threads busy-wait for more work after every call: at 100,000 chunks that took a
core for ~15 ms per query from the BM25 side and the embedding (a 100,000 x 384 scan: CPU 32 -> 17 ms,
wall 33 -> 25 ms at load 5-7). The parts start at multiples of 64 rows, so every similarity is bit-identical
to one single-threaded call's, whatever the number of cores (OpenBLAS's own split moved a few rows' last
bits with the core count)."""
SCAN_SPLIT_ROWS = 20_000
"""Below this many rows a scan is one call in the caller's thread (a thread hop costs more than it saves)."""
_scan_pool: ThreadPoolExecutor | None = None
_blas_tried = False
_scan_lock = threading.Lock()


def _single_threaded_blas() -> bool:
    """Make numpy's bundled OpenBLAS (scipy-openblas) run every call in its caller's thread; False when this
    numpy has no such library (another BLAS, another platform): then scans stay single calls."""
    for path in sorted((Path(np.__file__).parent.parent / "numpy.libs").glob("libscipy_openblas*.so*")):
        try:
            lib = ctypes.CDLL(str(path))
            lib.scipy_openblas_set_num_threads64_(1)
            return bool(lib.scipy_openblas_get_num_threads64_() == 1)
        except (OSError, AttributeError):
            continue
    return False


def _scanner() -> ThreadPoolExecutor | None:
    """The threads scans are split over, started with the first scan (which also makes BLAS single-threaded);
    None when BLAS keeps its own."""
    global _scan_pool, _blas_tried
    with _scan_lock:
        if not _blas_tried:  # once: every scan asks
            _blas_tried = True
            if _single_threaded_blas():
                _scan_pool = ThreadPoolExecutor(max_workers=SCAN_THREADS, thread_name_prefix="scan")
        return _scan_pool


def _scan(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """matrix @ query, in SCAN_THREADS row ranges at once when large (see SCAN_THREADS). A small scan is one
    call, also single-threaded: left to OpenBLAS's own threads, a scan of SciFact's 10,657 chunks took
    ~12 ms of a loaded machine's time instead of ~1 ms, its threads spinning beside BM25 and the embedding."""
    pool = _scanner()
    if pool is None or len(matrix) < SCAN_SPLIT_ROWS:
        sims: np.ndarray = matrix @ query
        return sims
    rows = len(matrix)
    out = np.empty(rows, dtype=np.result_type(matrix, query))
    # at multiples of 64 rows: the kernel takes rows in groups of 4, so each row is summed as in one call
    bounds = [rows * k // SCAN_THREADS // 64 * 64 for k in range(SCAN_THREADS)] + [rows]
    parts = [pool.submit(np.matmul, matrix[a:b], query, out=out[a:b]) for a, b in itertools.pairwise(bounds)]
    for part in parts:
        part.result()
    return out


def unit(vector: Sequence[float] | np.ndarray) -> np.ndarray:
    """`vector` scaled to length 1 (a zero vector stays zero)."""
    v = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Each row of `matrix` scaled to length 1 (a zero row stays zero), as `unit` scales one vector."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def _unit_rows(vectors: pa.ChunkedArray | pa.Array, dim: int) -> np.ndarray:
    vectors = vectors.combine_chunks() if isinstance(vectors, pa.ChunkedArray) else vectors
    return unit_rows(np.asarray(vectors.flatten().to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, dim))


@dataclass(frozen=True)
class Replica:
    version: int
    rows: pa.Table  # every column but LEFT_OUT
    matrix: np.ndarray  # (rows, dim) float32, each row scaled to unit length
    by_parent: dict[str, list[int]]
    by_id: dict[str, int]
    row_ids: np.ndarray
    """Each row's address in the table (`_rowid`: fragment << 32 | offset), or -1 where unknown. Lance never
    gives an address to two rows: fragments are immutable and their numbers only grow, through compaction
    and overwrites alike. So a row LanceDB returns at a held address is the held row, in any version."""
    languages: np.ndarray
    """Each row's passage language (object array: a code or None), UNREAD until first asked (languages_of)."""

    @classmethod
    def of(cls, version: int, rows: pa.Table, matrix: np.ndarray, row_ids: np.ndarray | None = None,
           languages: np.ndarray | None = None) -> Replica:
        rows = rows.combine_chunks()
        by_parent: dict[str, list[int]] = {}
        for i, parent in enumerate(rows.column("parent_id").to_pylist()):
            by_parent.setdefault(parent, []).append(i)
        by_id = {cid: i for i, cid in enumerate(rows.column("id").to_pylist())}
        addresses = np.full(rows.num_rows, -1, dtype=np.int64) if row_ids is None else row_ids.astype(np.int64)
        if languages is None:
            languages = np.full(rows.num_rows, UNREAD, dtype=object)
        return cls(version, rows, np.ascontiguousarray(matrix, dtype=np.float32), by_parent, by_id, addresses,
                   languages)

    @classmethod
    def from_arrow(cls, version: int, table: pa.Table) -> Replica:
        """A replica of every row of `table` (all columns but keywords/metadata, with `vector`, and `_rowid`
        when read with it)."""
        dim = table.schema.field("vector").type.list_size
        row_ids = table.column(ROW_ID).to_numpy() if ROW_ID in table.column_names else None
        return cls.of(version, table.drop_columns([c for c in (*LEFT_OUT, ROW_ID) if c in table.column_names]),
                      _unit_rows(table.column("vector"), dim), row_ids)

    def refreshed(self, version: int, keys: pa.Table,
                  read: Callable[[list[int]], pa.Table]) -> tuple[Replica, int]:
        """The replica of a newer version whose rows are `keys` (KEY_COLUMNS and `_rowid`).

        Rows whose key this replica holds are kept; `read(row_ids)` returns the others
        in full (any order, with `_rowid`). Returns the replica and how many rows were read."""
        ids = self.rows.column("id").combine_chunks()
        held = pc.index_in(keys.column("id"), value_set=ids).fill_null(-1).to_numpy().astype(np.int64)
        stamp = keys.column("ingested_at").to_numpy()
        old_stamp = self.rows.column("ingested_at").to_numpy()
        keep = held >= 0
        keep[keep] = (old_stamp[held[keep]] == stamp[keep]) & (stamp[keep] > 0)  # no stamp: always read
        kept = held[keep]
        addresses = keys.column(ROW_ID).to_numpy()
        missing = addresses[~keep]
        fresh = read(missing.tolist()) if len(missing) else None
        if fresh is None:
            return Replica.of(version, self.rows.take(pa.array(kept)), self.matrix[kept], addresses[keep],
                              self.languages[kept]), 0
        wanted = keys.filter(pa.array(~keep)).column("id").to_pylist()
        if sorted(fresh.column("id").to_pylist()) != sorted(wanted):
            raise LookupError("rows changed while the replica read them")
        part = Replica.from_arrow(version, fresh)
        rows = pa.concat_tables([self.rows.take(pa.array(kept)), part.rows.select(self.rows.column_names)])
        return (Replica.of(version, rows, np.vstack([self.matrix[kept], part.matrix]),
                           np.concatenate([addresses[keep], part.row_ids]),
                           np.concatenate([self.languages[kept], part.languages])), fresh.num_rows)

    @cached_property
    def _names(self) -> frozenset[str]:
        return frozenset(self.rows.column_names)

    def serves(self, columns: Sequence[str]) -> bool:
        return self._names.issuperset(columns)

    def similarities(self, vector: Sequence[float] | np.ndarray) -> np.ndarray:
        """Cosine similarity of every row to `vector`, in row order."""
        return _scan(self.matrix, unit(vector))

    @cached_property
    def _by_source(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(every source id once, sorted; row positions grouped by source in that order; where each
        source's group starts, and the end), built at the first scoped query of this version."""
        column = self.rows.column("source_id")
        order = pc.sort_indices(column).to_numpy()
        ordered = column.take(pa.array(order)).to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))[:len(ordered)]
        return ordered[starts].tolist(), order, np.append(starts, len(order))

    def _under(self, prefix: str, folder: str) -> np.ndarray:
        """Positions of the rows whose source id is `prefix` or starts with `folder` (prefix + "/"): two ranges
        of the sorted source ids (Python's str order is Arrow's byte order of UTF-8), found by bisection."""
        sources, order, bounds = self._by_source
        after = folder[:-1] + chr(ord(folder[-1]) + 1)  # the first string past every one that starts with folder
        runs = [(bisect_left(sources, prefix), bisect_right(sources, prefix)),
                (bisect_left(sources, folder), bisect_left(sources, after))]
        return np.concatenate([order[bounds[a]:bounds[b]] for a, b in runs])

    def mask(self, where: Filter) -> np.ndarray:
        """Which rows `where` keeps (the same rows as its SQL form in LanceDB)."""
        keep = np.ones(self.rows.num_rows, dtype=bool)
        if where.prefix is not None:
            keep[:] = False
            keep[self._under(where.prefix, where.folder)] = True
        if where.doc_class is not None:
            same = pc.equal(self.rows.column("doc_class"), where.doc_class).fill_null(False)
            keep &= np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
        return keep

    def best(self, sims: np.ndarray, limit: int, mask: np.ndarray | None = None) -> np.ndarray:
        """Positions of the `limit` most similar rows (within `mask`), most similar first, ties by id."""
        candidates = np.arange(len(sims)) if mask is None else np.flatnonzero(mask)
        if limit < 1 or not len(candidates):
            return candidates[:0]
        if limit < len(candidates):
            values = sims[candidates]
            cut = np.partition(values, len(values) - limit)[len(values) - limit]
            candidates = candidates[values >= cut]  # every row tied at the cut, so the id decides among them
        ids = self.rows.column("id").take(pa.array(candidates)).to_pylist()
        order = sorted(range(len(candidates)), key=lambda i: (-float(sims[candidates[i]]), ids[i]))[:limit]
        return candidates[order]

    def rank(self, vector: Sequence[float] | np.ndarray, limit: int, where: Filter | None,
             columns: list[str]) -> Side:
        """The exact ranking (storage.reads.Ranker): every row's similarity, the filter a mask over them."""
        sims = self.similarities(vector)
        found = self.best(sims, limit, None if where is None else self.mask(where))
        return Side.of(self.rows_at(found, columns, sims), "_distance")

    def rows_at(self, positions: np.ndarray, columns: Sequence[str], sims: np.ndarray) -> list[dict[str, Any]]:
        """The rows at `positions` with `_distance` (1 - cosine similarity)."""
        out: list[dict[str, Any]] = self.rows.select(list(columns)).take(pa.array(positions, pa.int64())).to_pylist()
        for row, i in zip(out, positions, strict=True):
            row["_distance"] = 1.0 - float(sims[i])
        return out

    @cached_property
    def _by_address(self) -> tuple[np.ndarray, np.ndarray]:
        """(the row addresses sorted, the position of each), built at the first lookup of this version."""
        order = np.argsort(self.row_ids, kind="stable")
        return self.row_ids[order], order

    def rows_at_addresses(self, found: pa.Table, columns: Sequence[str]) -> list[dict[str, Any]] | None:
        """`columns` (and `id`) of the rows at the addresses `found` names (its `_rowid` column), in its order,
        with its other columns; None when this replica does not hold one of them."""
        wanted = found.column(ROW_ID).to_numpy().astype(np.int64)
        addresses, order = self._by_address
        at = np.minimum(np.searchsorted(addresses, wanted), max(len(addresses) - 1, 0))
        if not len(addresses) or not np.array_equal(addresses[at], wanted):
            return None if len(wanted) else []
        rows: list[dict[str, Any]] = (self.rows.select(sorted({*columns, "id"}))
                                      .take(pa.array(order[at], pa.int64())).to_pylist())
        for name in found.column_names:
            if name != ROW_ID:
                for row, value in zip(rows, found.column(name).to_pylist(), strict=True):
                    row[name] = value
        return rows

    def languages_of(self, ids: Sequence[str], detect: Callable[[str], str | None]) -> dict[str, str | None]:
        """The language `detect` (always the same detector) reads in the text of each row of `ids` this replica
        holds, by id: each row's is detected once and kept while the row is unchanged, also through refreshes,
        so a query's ranked lists need not carry their passages' texts to tell their languages."""
        out: dict[str, str | None] = {}
        unread: list[tuple[str, int]] = []
        for cid in ids:
            at = self.by_id.get(cid)
            if at is None:
                continue
            known = self.languages[at]
            if known == UNREAD:
                unread.append((cid, at))
            else:
                out[cid] = known
        if unread:
            texts = self.rows.column("text").take(pa.array([at for _, at in unread], pa.int64())).to_pylist()
            for (cid, at), text in zip(unread, texts, strict=True):
                self.languages[at] = out[cid] = detect(text or "")
        return out

    def in_sections(self, parent_ids: Sequence[str], columns: Sequence[str],
                    also: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Every row whose parent_id is one of `parent_ids`, and the rows `also` (by id) it holds, each once."""
        positions = sorted({i for p in set(parent_ids) for i in self.by_parent.get(p, ())}
                           | {self.by_id[c] for c in also if c in self.by_id})
        rows: list[dict[str, Any]] = self.rows.select(list(columns)).take(pa.array(positions, pa.int64())).to_pylist()
        return rows
