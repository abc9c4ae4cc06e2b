"""Which source and doc class each row of the chunks table holds, by its row address, so that a scoped vector
search can mask LanceDB's unfiltered candidates itself (reads._postfiltered) instead of prefiltering.

LanceDB's prefilter tests its row mask at every row of every partition a search probes, one row at a time and
off its batched distance kernel: at 1M chunks a search inside a tenth of them spent ~21 ms in the index where
the unfiltered one spent ~6 (docs/BENCHMARKS.md, Growth). Asked for enough candidates that the scope's best
are among them, the unfiltered search masked by this book finds them as well, through the same partitions and
codes.

A row's address is its fragment's id and its offset in it. A fragment's rows never move while it exists
(compaction writes new fragments; a deletion only hides rows), so the book of a new version reads only the
fragments it does not hold or whose deletions changed: after a sync's commit its new rows, after a compaction
the table again (1M chunks: ~0.6 s; the book holds 4 bytes a row and each (source, class) once).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from appliance.storage.filters import Filter

ABSENT = -1
"""A fragment offset that held no live row when the fragment was read."""
OFFSET_BITS = 32
"""A row address is its fragment's id shifted past the offset's bits, or'ed with the offset (Lance's layout)."""


@dataclass(frozen=True)
class _Fragment:
    """One fragment as read: what identifies its rows and deletions, and each offset's (source, class) code."""

    identity: tuple[str, str]
    """Its first data file (a fragment of a table written anew under the same id has another) and its
    deletion file (a deletion since the read makes another)."""
    codes: np.ndarray
    """int32 by offset: the row's code in AddressBook.sources / .classes, ABSENT where no live row was read."""


def _identity(fragment: Any) -> tuple[str, str]:
    meta = fragment.metadata
    files = fragment.data_files()
    deletion = meta.deletion_file
    return (files[0].path if files else "", "" if deletion is None else repr(deletion))


@dataclass(frozen=True)
class AddressBook:
    """The rows of one version of the chunks table: read with `read`, asked with `share` and `keeps`."""

    version: int
    fragments: Mapping[int, _Fragment]
    sources: pa.Array
    """The source id of each code."""
    classes: pa.Array
    """The doc class of each code (null where the row holds none)."""
    counts: np.ndarray
    """Live rows by code."""
    _masks: dict[Filter, tuple[np.ndarray, float]] = field(default_factory=dict, compare=False, repr=False)
    """Each filter asked: whether it keeps each code (and False after the last, for ABSENT), and its share."""

    @classmethod
    def read(cls, dataset: Any, old: AddressBook | None = None) -> AddressBook:
        """The book of `dataset` (a Lance dataset at one version), reusing the fragments `old` read as they are."""
        held = old.fragments if old is not None else {}
        pairs: dict[tuple[str, str | None], int] = {}
        sources: list[str] = []
        classes: list[str | None] = []
        if old is not None:  # codes stay valid only with the table of codes they index
            sources, classes = old.sources.to_pylist(), old.classes.to_pylist()
            pairs = {pair: code for code, pair in enumerate(zip(sources, classes, strict=True))}
        fragments: dict[int, _Fragment] = {}
        for fragment in dataset.get_fragments():
            identity = _identity(fragment)
            kept = held.get(fragment.fragment_id)
            if kept is None or kept.identity != identity:
                kept = _Fragment(identity, _codes(fragment, pairs, sources, classes))
            fragments[fragment.fragment_id] = kept
        codes = np.concatenate([kept.codes for kept in fragments.values()]) if fragments else np.empty(0, np.int32)
        counts = np.bincount(codes[codes != ABSENT], minlength=len(sources))
        book = cls(int(dataset.version), fragments, pa.array(sources, pa.string()), pa.array(classes, pa.string()),
                   counts)
        if old is not None and len(sources) > 2 * max(1, int(np.count_nonzero(counts))):
            return cls.read(dataset)  # mostly codes no row holds any more: the table of codes read anew
        return book

    def share(self, where: Filter) -> float:
        """The share of the live rows `where` keeps."""
        return self._asked(where)[1]

    def keeps_everything(self, where: Filter) -> bool:
        """Whether `where` keeps every live row (a scope of the whole folder indexed)."""
        return self._asked(where)[1] >= 1.0

    def keeps(self, addresses: np.ndarray, where: Filter) -> np.ndarray | None:
        """Whether `where` keeps each row at `addresses` (Lance `_rowid`s), or None when the book does not hold
        one of them (a fragment written or rewritten since it was read)."""
        addresses = np.asarray(addresses, dtype=np.uint64)
        ids = (addresses >> np.uint64(OFFSET_BITS)).astype(np.int64)
        offsets = (addresses & np.uint64((1 << OFFSET_BITS) - 1)).astype(np.int64)
        codes = np.empty(len(addresses), dtype=np.int64)
        for fragment_id in np.unique(ids):
            fragment = self.fragments.get(int(fragment_id))
            at = ids == fragment_id
            if fragment is None or int(offsets[at].max()) >= len(fragment.codes):
                return None
            codes[at] = fragment.codes[offsets[at]]
        if (codes == ABSENT).any():
            return None
        return self._asked(where)[0][codes]

    def _asked(self, where: Filter) -> tuple[np.ndarray, float]:
        """Whether `where` keeps each code (as Filter.keeps does a row), False after the last; and its share."""
        known = self._masks.get(where)
        if known is not None:
            return known
        keep = np.ones(len(self.sources), dtype=bool)
        if where.prefix is not None:
            under = pc.or_(pc.equal(self.sources, where.prefix), pc.starts_with(self.sources, where.folder))
            keep &= _booleans(under)
        if where.doc_class is not None:
            keep &= _booleans(pc.equal(self.classes, where.doc_class))
        total = int(self.counts.sum())
        asked = np.append(keep, False), float(self.counts[keep].sum() / total) if total else 0.0
        if len(self._masks) >= 64:  # a few scopes are asked again and again; any others are cheap to redo
            self._masks.clear()
        self._masks[where] = asked
        return asked


def _booleans(values: pa.Array) -> np.ndarray:
    return np.asarray(values.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _codes(fragment: Any, pairs: dict[tuple[str, str | None], int], sources: list[str],
           classes: list[str | None]) -> np.ndarray:
    """Each offset's code in `sources`/`classes` (extended with the pairs the fragment brings), ABSENT where the
    fragment holds no live row."""
    table = fragment.to_table(columns=list(Filter.COLUMNS), with_row_address=True)
    offsets = (table.column("_rowaddr").to_numpy() & ((1 << OFFSET_BITS) - 1)).astype(np.int64)
    size = max(int(fragment.metadata.physical_rows or 0), int(offsets.max()) + 1 if len(offsets) else 0)
    codes = np.full(size, ABSENT, dtype=np.int32)
    if not len(offsets):
        return codes
    local_pairs, inverse = _distinct_pairs(table.column("source_id"), table.column("doc_class"))
    local_codes = np.empty(len(local_pairs), dtype=np.int32)
    for at, pair in enumerate(local_pairs):
        code = pairs.get(pair)
        if code is None:
            code = pairs[pair] = len(sources)
            sources.append(pair[0])
            classes.append(pair[1])
        local_codes[at] = code
    codes[offsets] = local_codes[inverse]
    return codes


def _distinct_pairs(source_ids: pa.ChunkedArray, doc_classes: pa.ChunkedArray
                    ) -> tuple[list[tuple[str, str | None]], np.ndarray]:
    """The distinct (source id, doc class) pairs of a fragment's rows, and each row's place among them."""
    def encoded(column: pa.ChunkedArray) -> tuple[list[Any], np.ndarray]:
        dictionary = pc.dictionary_encode(column.combine_chunks(), null_encoding="encode")
        return dictionary.dictionary.to_pylist(), dictionary.indices.to_numpy(zero_copy_only=False).astype(np.int64)

    source_values, source_at = encoded(source_ids)
    class_values, class_at = encoded(doc_classes)
    combined = source_at * max(1, len(class_values)) + class_at
    distinct, inverse = np.unique(combined, return_inverse=True)
    width = max(1, len(class_values))
    pairs = [(source_values[int(c) // width], class_values[int(c) % width]) for c in distinct]
    return pairs, inverse.reshape(-1)

