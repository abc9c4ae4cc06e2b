"""The query reader: vector and BM25 sides, section and document reads, and the in-memory replica.

A vector side is ranked by one of two `Ranker`s: the exact in-memory replica (appliance.storage.replica)
while the index fits the process's memory budget, else LanceDB's approximate index (`LanceRanker`);
`IndexReader.ranker` is the one place that chooses. Both rank the chunks a filter keeps (storage.filters): the
replica masks its exact similarities, LanceDB prefilters, or, for a scope of a large enough share of the rows,
searches unfiltered and the reader masks the candidates with its address book (storage.addresses); each side is
scaled by its own candidates inside the filter (storage.sides.Side).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np

from appliance.platform.hidden_imports import pandas_hidden

with pandas_hidden():  # pyarrow.dataset probes for pandas on import; nothing here uses it
    from lancedb.query import BooleanQuery, FullTextOperator, LanceTakeQueryBuilder, MatchQuery, Occur
    from lancedb.table import Table

from appliance.chunks import STORED_CHUNK_COLUMNS, StoredChunk, body_of
from appliance.languages import LANGUAGES
from appliance.storage.addresses import AddressBook
from appliance.storage.filters import Filter
from appliance.storage.replica import KEY_COLUMNS, Replica, fits, unit, unit_rows
from appliance.storage.sides import Side
from appliance.storage.tables import (
    CARD,
    CARD_FIELDS,
    FTS_COLUMN,
    IN_BATCH,
    VECTOR_INDEX_TYPE,
    VECTOR_PARTITION_ROWS,
    Tables,
    code_bits,
    filter_sql,
    guarded,
    in_document_order,
    in_list,
    sql_str,
    vector_index,
)

EF_SEARCH = 3200
"""Candidates a search of an HNSW index explores (an index an earlier version built, until a refresh replaces
it: tables.VECTOR_INDEX_TYPE), shared out over its segments: at 1M chunks 3,200 found 0.97 of the true 10
nearest in one segment."""
PROBED_SHARE = 0.3
"""The share of the vector index's partitions (IndexReader.vector_partitions) whose codes a search scans, in each
segment. At 1M chunks in 1,000 partitions of four-bit codes, 0.2 / 0.3 / 0.45 found 0.934 / 0.983 / 0.998 of
the true 10 nearest in 21 / 22 / 25 ms p50 (scripts/bench_scale.py's vectors, mixes of real ones with noise:
harder to tell apart than a real corpus's, so a real index fares no worse)."""
MIN_PROBES = 16
"""The fewest partitions a search scans, however few the index has. A share of few partitions is a coarse cut:
over our manuals (5,834 chunks, real questions), 30 % of ~6 partitions found 0.958 of the true 10 nearest and
16 of them all, of ~24 0.971 and 1.0, of ~59 0.986 and 0.983 (docs/BENCHMARKS.md, Answer passages). An index has
so few partitions only when a small memory budget sends a small table through LanceDB, where 16 partitions are
a few thousand codes; from ~54 partitions on, the share is more."""
ONE_BIT_REFINED = 1200
"""An index of one-bit codes (an earlier version's, until a refresh builds it anew: tables.VECTOR_CODE_BITS)
re-ranks at least this many of its candidates on the stored vectors: a bit a dimension ranks too coarsely to
return its own best (at 1M chunks, 800 re-ranked found 0.94 of the true 10 nearest, 1,200 0.97). Four bits rank
well enough that a search re-reads only the rows it returns, for their exact distances."""
TIE_MARGIN = 8
"""Rows a LanceDB search returns beyond the limit, so rows tied at the cut are chosen by id, not by storage order."""
POSTFILTER_SLACK = 1.5
"""A scoped vector search masks (_postfiltered) an unfiltered one this many times deeper than the scope's share of
the rows says it needs: a scope's rows cluster, so some queries find fewer of them near than their share."""
POSTFILTER_DEPTH = 4000
"""The deepest unfiltered search a scoped one masks: at 1M chunks one of 3,200 candidates took ~24 ms where the
prefiltered search took ~36, so scopes under ~6% of the rows are prefiltered."""
log = logging.getLogger(__name__)
VECTOR_STATISTICS_ENV = ("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")


def leave_out_centroids() -> None:
    """Lance's statistics of a vector index (counted_partitions) leave its centroids out: in their JSON they took
    16 MB and ~270 ms at 1M chunks. Set as this module is imported, before any thread asks; an operator's own
    setting stands."""
    os.environ.setdefault(*VECTOR_STATISTICS_ENV)


leave_out_centroids()


def _embedded_by(model_id: str, scheme: str) -> str:
    """Rows whose vectors the model `model_id` made from chunks cut by `scheme`."""
    return f"model_id = {sql_str(model_id)} AND scheme = {sql_str(scheme)}"


_CARD_AT = {name: at for at, name in enumerate(CARD_FIELDS)}


def carded(columns: Iterable[str], cards: bool) -> tuple[list[str], tuple[str, ...]]:
    """What a read of `columns` selects, and which of them it takes from the card (tables.CARD): the card in place
    of the CARD_FIELDS among them, where the table holds cards and two or more would be read (one column is read
    as cheaply as the card)."""
    wanted = sorted(set(columns))
    held = tuple(name for name in wanted if name in _CARD_AT)
    if not cards or len(held) < 2:
        return wanted, ()
    return [CARD, *sorted(set(wanted) - set(held))], held


def _uncarded(rows: list[dict[str, Any]], held: tuple[str, ...]) -> list[dict[str, Any]] | None:
    """`rows` read by `carded`, with the columns `held` taken from each row's card; None when a row has none (an
    earlier version wrote it beside this one: tables.OLD_CARD), to be read again column by column."""
    if not held:
        return rows
    for row in rows:
        card = row.pop(CARD)
        if card is None:
            return None
        values = json.loads(card)
        for name in held:
            row[name] = values[_CARD_AT[name]]
    return rows


def _listed(query, columns: Iterable[str], cards: bool,  # type: ignore[no-untyped-def]
            deadline: timedelta | None, computed: tuple[str, ...] = (), ranked: bool = False) -> list[dict[str, Any]]:
    """`query`'s rows with `columns` and the `computed` ones LanceDB adds (`_distance`, `_score`), each once; the
    fields a card holds are read from it where that pays (carded), and the whole read again column by column where
    a row has no card (an earlier version wrote it). Row ids are declined in so many words: asked nothing, LanceDB
    fetches the table's schema and walks it for blob columns at every read (~0.5 ms of Python). A `ranked` list's
    vectors are numpy rows: made Python lists of floats and then arrays again (IndexReader.similarities), 166 of
    them took 4.7 ms, against 0.3 straight from Arrow."""
    wanted = set(columns) - set(computed)
    selected, held = carded(wanted, cards)
    rows = _uncarded(_read(query, [*selected, *computed], deadline, ranked), held)
    return rows if rows is not None else _read(query, [*sorted(wanted), *computed], deadline, ranked)


def _read(query, columns: list[str], deadline: timedelta | None,  # type: ignore[no-untyped-def]
          ranked: bool) -> list[dict[str, Any]]:
    """`query`'s rows with `columns` as LanceDB gives them (a `ranked` list's vectors as numpy rows: _listed)."""
    query = query.select(columns)
    table = (query if isinstance(query, LanceTakeQueryBuilder) else query.with_row_id(False)).to_arrow(timeout=deadline)
    vectors = table.column("vector").combine_chunks() if ranked and "vector" in table.column_names else None
    if vectors is None or vectors.null_count:
        return table.to_pylist()  # type: ignore[no-any-return]
    rows = table.drop_columns(["vector"]).to_pylist()
    matrix = vectors.flatten().to_numpy(zero_copy_only=False).reshape(len(rows), vectors.type.list_size)
    for row, vector in zip(rows, matrix, strict=True):
        row["vector"] = vector
    return rows  # type: ignore[no-any-return]


def probed(partitions: int) -> int:
    """How many of a vector index's `partitions` a search scans: PROBED_SHARE of them, at least MIN_PROBES."""
    return max(MIN_PROBES, math.ceil(PROBED_SHARE * partitions))


def _nearest(chunks, vector: Sequence[float] | np.ndarray, limit: int, where: Filter | None,  # type: ignore[no-untyped-def]
             columns: list[str], index: Any, partitions: int, deadline: timedelta | None,
             cards: bool = False) -> list[dict[str, Any]]:
    """LanceDB's nearest chunks with exact distances (the rows the vector `index` returns measured again on
    the stored vectors), ties by id, so a chunk's distance does not depend on the filter; the filtered and the
    unfiltered search use the same index the same way. A search scans `probed(partitions)` of the index's partitions.
    A filtered one that finds fewer rows inside the filter there than it asks for searches again through every
    partition (a scope of a few chunks lies in a few). Asked to go on at once, LanceDB probed far past what
    it needed: at 1M chunks a search inside a tenth of them took 54 ms p50 where the bounded one took 15."""
    refined = ONE_BIT_REFINED if index is not None and code_bits(index) == 1 else 0
    refine = max(1, -(-refined // (limit + TIE_MARGIN)))
    measured = index is not None and not refined  # else LanceDB's distances are exact: a flat scan, or re-ranked
    probes = probed(partitions)

    def search(most_probes: int) -> list[dict[str, Any]]:
        query = chunks.search(list(vector), vector_column_name="vector").distance_type("cosine")
        if refined:  # LanceDB re-ranks them on the stored vectors: more candidates than rows returned
            query = query.refine_factor(refine)
        if index is not None:
            query = query.minimum_nprobes(probes).maximum_nprobes(most_probes)
            if index.index_type != VECTOR_INDEX_TYPE:  # an earlier version's HNSW index, until the next refresh
                query = query.ef(max((limit + TIE_MARGIN) * refine, EF_SEARCH // (index.num_segments or 1)))
        if where is not None:
            query = query.where(filter_sql(where), prefilter=True)
        wanted = [*columns, "id", "vector"] if measured else [*columns, "id"]
        rows = _listed(query.limit(limit + TIE_MARGIN), wanted, cards, deadline, ("_distance",), ranked=True)
        return _measured(rows, vector, {"vector"} - set(columns)) if measured else rows

    rows = search(probes)
    if where is not None and index is not None and len(rows) < limit + TIE_MARGIN:
        rows = search(0)  # 0: no bound
    return sorted(rows, key=lambda r: (r["_distance"], r.get("id", "")))[:limit]


def _measured(rows: list[dict[str, Any]], vector: Sequence[float] | np.ndarray,
              dropped: Iterable[str]) -> list[dict[str, Any]]:
    """`rows` (read with their vectors) with their exact `_distance` to `vector` (1 - cosine similarity), and the
    columns `dropped` taken out again. Measured here rather than by LanceDB's refine step, which reads the vectors
    in one pass and the rows' other columns in another (at 1M chunks ~2 % of a query's CPU: docs/BENCHMARKS.md)."""
    if not rows:
        return rows
    matrix = unit_rows(np.stack([np.asarray(row["vector"], dtype=np.float32) for row in rows]))
    for row, distance in zip(rows, (1.0 - matrix @ unit(vector)).tolist(), strict=True):
        row["_distance"] = distance
        for name in dropped:
            del row[name]
    return rows


def _postfiltered(chunks, vector: Sequence[float] | np.ndarray, limit: int, where: Filter,  # type: ignore[no-untyped-def]
                  columns: list[str], partitions: int, deadline: timedelta | None, cards: bool,
                  book: AddressBook) -> list[dict[str, Any]] | None:
    """_nearest inside `where` without LanceDB's prefilter: an unfiltered search deep enough for the scope's share
    of the rows (POSTFILTER_SLACK), masked by the `book` of this version, the first `limit + TIE_MARGIN` rows kept
    read by address with their vectors for exact distances. It probes the same partitions as the prefiltered
    search and ranks by the same codes, so the scope's best there are the best inside the unfiltered list, and
    both re-rank them on the stored vectors; LanceDB measures a code in its batched kernel a little differently
    from its masked one, so a list may differ by a row at the cut (at 1M chunks the scope's recall@10 was 0.988
    both ways). For an index of this version's kind (_maskable). None, and the prefiltered search runs, for a
    scope too small to be found within POSTFILTER_DEPTH rows, when fewer rows inside are found than asked, and
    when a row read is outside `where` (a book that does not match the table): such a row is never returned."""
    want = limit + TIE_MARGIN
    share = book.share(where)
    depth = math.ceil(want * POSTFILTER_SLACK / share) if share > 0 else POSTFILTER_DEPTH + 1
    if depth > POSTFILTER_DEPTH:
        return None
    probes = probed(partitions)
    found = (chunks.search(list(vector), vector_column_name="vector").distance_type("cosine")
             .minimum_nprobes(probes).maximum_nprobes(probes).limit(depth)
             .select(["_distance"]).with_row_id(True).to_arrow(timeout=deadline))
    addresses = found.column("_rowid").to_numpy()
    ranked = addresses[np.lexsort((addresses, found.column("_distance").to_numpy()))]  # distance, then address
    kept = book.keeps(ranked, where)
    if kept is None or int(kept.sum()) < want:
        return None
    inside = ranked[kept][:want]
    rows = _listed(chunks.take_row_ids(inside.tolist()), [*columns, *Filter.COLUMNS, "id", "vector"], cards,
                   deadline, ranked=True)
    if len(rows) != want or not all(where.keeps(row) for row in rows):
        return None
    rows = _measured(rows, vector, {"vector", *Filter.COLUMNS} - set(columns))
    return sorted(rows, key=lambda r: (r["_distance"], r["id"]))[:limit]


def _maskable(index: Any) -> bool:
    """Whether a scoped search of the vector `index` may mask an unfiltered one (_postfiltered): this version's
    kind and codes, which re-rank only the rows they return (not an earlier version's HNSW or one-bit index)."""
    return index is not None and index.index_type == VECTOR_INDEX_TYPE and code_bits(index) != 1


def _replaced(old: Any, new: Any) -> bool:
    """Whether the index `old` (an IndexConfig) is gone at the listing that has `new` under its name: merged or
    remapped (another uuid without more segments), as a fold merges the B-trees and a sync's end remaps every
    index; a segment a fold adds leaves the others in use."""
    return new is None or (new.index_uuid != old.index_uuid and (new.num_segments or 1) <= (old.num_segments or 1))


def _fts_query(terms: str | Mapping[str, float]) -> str | MatchQuery | BooleanQuery:
    """A plain OR query of terms, or one of weighted terms (the cross-language synonym sets of
    appliance.search.crosslingual). Weighted terms that share one weight are one match query with that boost,
    which scores the same: LanceDB answers a BooleanQuery by scoring every posting of every clause (at 1M
    chunks ~60 ms for a single common term, 3 ms as a match query), and a translated list pruned to the terms
    of a few stray passages (IndexReader.foreign_vocabulary) mostly keeps one."""
    if isinstance(terms, str):
        return terms

    def match(query: str, boost: float) -> MatchQuery:
        return MatchQuery(query, FTS_COLUMN, boost=boost, fuzziness=0, max_expansions=50,
                          operator=FullTextOperator.OR, prefix_length=0, document_granularity=None)

    if len(set(terms.values())) == 1:
        return match(" ".join(sorted(terms)), next(iter(terms.values())))
    return BooleanQuery([(Occur.SHOULD, match(term, boost)) for term, boost in sorted(terms.items())])


def _bm25(chunks, terms: str | Mapping[str, float], limit: int, where: Filter | None,  # type: ignore[no-untyped-def]
          columns: list[str], replica: Replica | None = None, *, deadline: timedelta | None,
          among: str | None = None, cards: bool = False) -> list[dict[str, Any]]:
    """LanceDB's best BM25 matches, ties by id, among the rows the SQL `among` selects (all without it). With a
    `replica` that serves `columns`, the search returns only each match's address and score and the replica
    gives the rest (at 100,000 chunks BM25 takes half the time it takes when it reads the matches' columns off
    disk), unless it does not hold some match's address (a row written or moved since it was read): then as
    without."""
    def search() -> Any:
        query = chunks.search(_fts_query(terms), query_type="fts", fts_columns=FTS_COLUMN)
        clauses = [f"({c})" for c in (among, filter_sql(where) if where is not None else None) if c]
        return query.where(" AND ".join(clauses), prefilter=True) if clauses else query

    rows = None
    if replica is not None and replica.serves(columns):
        found = search().select(["_score"]).with_row_id(True).limit(limit + TIE_MARGIN).to_arrow(timeout=deadline)
        rows = replica.rows_at_addresses(found, columns)
    if rows is None:
        rows = _listed(search().limit(limit + TIE_MARGIN), [*columns, "id"], cards, deadline, ("_score",), ranked=True)
    return sorted(rows, key=lambda r: (-r["_score"], r.get("id", "")))[:limit]


FOREIGN_VOCABULARY_ROWS = 5000
"""Up to this many passages outside a query's language, the reader keeps their terms in memory to prune the
translated keyword list (IndexReader.foreign_vocabulary): stray passages in an index of one language, read in
a few milliseconds and held in well under a megabyte. A truly mixed index has more, and its lists are searched
whole."""


def _within(terms: str | Mapping[str, float], vocabulary: frozenset[str]) -> str | dict[str, float]:
    """The terms of a keyword query (a plain string or weighted terms) that `vocabulary` holds."""
    if isinstance(terms, str):
        return " ".join(term for term in terms.split() if term in vocabulary)
    return {term: boost for term, boost in terms.items() if term in vocabulary}


def other_languages(language: str) -> str:
    """The rows whose stored language (`lang`, tables.stored_language) is another of LANGUAGES than `language`,
    or unknown (a row an older version wrote): the passages a translated keyword list judges (search.fusion).
    Named as a positive set, so LanceDB answers it from the column's B-tree."""
    others = [code for code in LANGUAGES if code != language]
    return f"lang IS NULL OR {in_list('lang', others)}"


def _masked(search, limit: int, where: Filter | None, columns: list[str], key: str,  # type: ignore[no-untyped-def]
            keeps_everything: bool = False) -> Side:
    """One side through LanceDB: the `limit` best chunks inside `where`, however deep (a prefiltered search, so a
    filter never truncates), scaled by themselves (Side.of).

    When the filter likely keeps every chunk (`keeps_everything`, a guess), the unfiltered search runs instead,
    without the prefilter's cost, and its rows are the answer if the filter keeps them all or nothing deeper
    could match; else the prefiltered search runs after it."""
    if where is not None and keeps_everything:
        whole = search(None, sorted(set(columns) | set(Filter.COLUMNS)))
        if len(whole) < limit or all(where.keeps(row) for row in whole):
            return Side.of([row for row in whole if where.keeps(row)], key)
    return Side.of(search(where, columns), key)


class Ranker(Protocol):
    """Ranks by one vector the chunks a filter keeps: the `limit` chunks nearest `vector` inside `where`,
    nearest first (ties by id), with `_distance` (1 - cosine similarity), scaled by themselves (Side.of)."""

    def rank(self, vector: Sequence[float] | np.ndarray, limit: int, where: Filter | None,
             columns: list[str]) -> Side: ...


@dataclass(frozen=True)
class LanceRanker:
    """LanceDB's approximate vector index (or its flat scan before there is one), exact distances."""

    chunks: Table
    deadline: timedelta | None
    """Tables.deadline: what one search may take (in a bucket; None on disk)."""
    partitions: Callable[[Table, Any], int] = lambda _, index: estimated_partitions(index)
    """The partitions of a vector index (IndexReader.vector_partitions)."""
    indexes: Callable[[Table], list[Any]] = lambda chunks: list(chunks.list_indices())
    """The indexes of the version read (IndexReader.indexes: listed once a version)."""
    cards: bool = False
    """Tables.cards_stored: whether the rows' columns may be read from their cards (carded)."""
    book: Callable[[Table], AddressBook | None] = lambda _: None
    """The address book of the version read (IndexReader.address_book), for scoped searches (_postfiltered)."""

    def rank(self, vector: Sequence[float] | np.ndarray, limit: int, where: Filter | None,
             columns: list[str]) -> Side:
        index = vector_index(self.chunks, self.indexes(self.chunks))  # the filtered and unfiltered search share it
        partitions = self.partitions(self.chunks, index) if index is not None else 0

        book = self.book(self.chunks) if where is not None and _maskable(index) else None

        def search(inside: Filter | None, wanted: list[str]) -> list[dict[str, Any]]:
            if inside is not None and book is not None:
                rows = _postfiltered(self.chunks, vector, limit, inside, wanted, partitions, self.deadline, self.cards,
                                     book)
                if rows is not None:
                    return rows
            return _nearest(self.chunks, vector, limit, inside, wanted, index, partitions, self.deadline, self.cards)

        # a scope holding every row (the whole folder indexed) is searched as none
        everything = where is not None and book is not None and book.keeps_everything(where)
        return _masked(search, limit, where, columns, "_distance", keeps_everything=everything)


def estimated_partitions(index: Any) -> int:
    """The partitions an index of its rows has when built whole (writes.VECTOR_INDEX). One that folds have grown
    has fewer, larger ones (at 1M chunks 511 against 1,000), so a search probing by this estimate scans more."""
    return max(1, math.ceil((index.num_indexed_rows or 0) / VECTOR_PARTITION_ROWS))


def counted_partitions(chunks: Table, index: Any) -> int | None:
    """The partitions of the vector `index`, the most of its segments', from Lance's statistics of it (~2 ms at 1M
    chunks without the centroids, which this reader never asks for: VECTOR_STATISTICS_ENV)."""
    stats = chunks.to_lance().stats.index_stats(index.name)
    return max((segment.get("num_partitions") or 0 for segment in stats.get("indices", ())), default=0) or None


class _View(NamedTuple):
    """What a query_view holds for its thread: the chunks handle, the version read and that version's replica."""

    chunks: Table | None
    version: int
    replica: Replica | None


class IndexReader:
    """Every read a query makes, and the sync's reads of stored vectors. Safe to share between threads."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self._replica: Replica | None = None
        self._replica_lock = threading.Lock()
        self._too_large: tuple[Table, int] | None = None
        """(the chunks handle, its version) last found too large for the replica."""
        self._pinned = threading.local()
        """This thread's `query_view` (a _View), while one is open."""
        self._vocabularies: dict[tuple[int, str], frozenset[str] | None] = {}
        """The terms of the passages outside each query language, for the version read last (foreign_vocabulary)."""
        self._partitions: dict[str, int] = {}
        """The partitions of each vector index this process has counted, by its uuid (vector_partitions)."""
        self._partitions_asked: set[str] = set()
        self._partitions_lock = threading.Lock()  # not the replica's: a replica's read holds that one for long
        self.replica_rows_read = 0
        """Rows the replica read in full so far (a refresh reads only the rows it does not hold)."""
        self._book: tuple[Table, AddressBook] | None = None
        """The chunks handle an address book was read through, and the book (address_book)."""
        self._book_reading = threading.Lock()
        """Held while a thread reads the next address book (one at a time: address_book)."""
        self._indexes: tuple[Table, int, list[Any]] | None = None
        """The chunks handle, a version of it and its indexes then (indexes)."""
        self._replaced_bytes = 0
        """The bytes of the indexes folds replaced since the handle was opened (_indexes_replaced)."""

    def forget(self) -> None:
        """Drop the replica and the address book (the tables they were read from were replaced)."""
        self._replica = None
        self._too_large = None
        self._book = None

    @contextlib.contextmanager
    def query_view(self) -> Iterator[None]:
        """One query's reads: the latest commit of every process (checkout_latest), and inside the
        block every read the replica serves comes from that version's replica.

        The table's version is asked once here instead of at each read (every ask is a round trip
        through LanceDB's event loop thread, ~1 ms apiece on a quiet machine and several under load),
        and a commit landing mid-query cannot give its ranking and its sections two versions."""
        view = self._latest_view()
        outer = getattr(self._pinned, "view", None)
        self._pinned.view = view
        try:
            yield
        finally:
            self._pinned.view = outer

    @guarded
    def _latest_view(self) -> _View:
        self.tables.refresh_for_read()
        chunks = self.tables.chunks()
        if chunks is None:
            return _View(None, 0, None)
        version = chunks.version
        if self._indexes_replaced(chunks, version):
            self.tables.renew_session()
            self._book = self._too_large = None  # nothing here holds the old session's handles
            chunks = self.tables.chunks()
            if chunks is None:
                return _View(None, 0, None)
            version = chunks.version
        return _View(chunks, version, self._replica_at(chunks, version))

    def indexes(self, chunks: Table, version: int | None = None) -> list[Any]:
        """The indexes of the version read (LanceDB's IndexConfigs), listed once a version (a round trip through
        LanceDB's event loop, ~0.65 ms); a new listing adds to the bytes folds replaced (_indexes_replaced)."""
        version = self._version(chunks) if version is None else version
        held = self._indexes
        if held is not None and held[0] is chunks and held[1] == version:
            return held[2]
        listed = list(chunks.list_indices())
        if held is None or held[0] is not chunks:
            self._replaced_bytes = 0  # a handle opened anew starts from nothing
        else:
            now = {index.name: index for index in listed}
            self._replaced_bytes += sum(old.size_bytes or 0 for old in held[2] if _replaced(old, now.get(old.name)))
        self._indexes = (chunks, version, listed)
        return listed

    def _indexes_replaced(self, chunks: Table, version: int) -> bool:
        """Whether folds have replaced half as many bytes of the indexes the handle read as it reads now, so its
        session's cache may hold half as much that no query reads again as it holds of use (Tables.renew_session):
        renewed at every fold, a server in a bucket would fetch every index anew after each sync's write."""
        live = sum(index.size_bytes or 0 for index in self.indexes(chunks, version))
        return 2 * self._replaced_bytes >= max(1, live)

    def _view_of(self, chunks: Table) -> _View | None:
        """This thread's query_view, when it holds `chunks`."""
        view: _View | None = getattr(self._pinned, "view", None)
        return view if view is not None and view.chunks is chunks else None

    def _version(self, chunks: Table) -> int:
        """The version this thread's query_view holds of `chunks`, else the table's current one."""
        view = self._view_of(chunks)
        return view.version if view is not None else chunks.version

    @guarded
    def vector_side(self, vector: Sequence[float] | np.ndarray, limit: int, where: Filter | None,
                    columns: list[str]) -> Side:
        """The `limit` chunks nearest `vector` inside `where`, nearest first (ties by id), with `_distance`."""
        ranker = self.ranker(columns)
        return Side([], 0.0, 0.0) if ranker is None else ranker.rank(vector, limit, where, columns)

    def ranker(self, columns: list[str]) -> Ranker | None:
        """What ranks a vector side returning `columns`: the replica of the version being read, while the index
        fits the memory budget (see _read_replica) and the replica holds those columns, else LanceDB; None
        before the index has a table."""
        chunks = self.tables.chunks()
        if chunks is None:
            return None
        replica = self._current_replica(chunks, columns)
        return replica if replica is not None else LanceRanker(
            chunks, self.tables.deadline, partitions=self.vector_partitions, indexes=self.indexes,
            cards=self.tables.cards_stored, book=self.address_book)

    def address_book(self, chunks: Table) -> AddressBook | None:
        """The address book of the version being read (storage.addresses), for a scoped vector search; None until
        it is read. A version without one has it read beside the queries, from the last one's (only the fragments
        that changed), so a scoped search never waits for it: it prefilters meanwhile."""
        held, version = self._book, self._version(chunks)
        book = held[1] if held is not None and held[0] is chunks else None  # a table opened anew starts a new book
        if book is not None and book.version == version:
            return book
        if self._book_reading.acquire(blocking=False):
            try:
                threading.Thread(target=self._read_book, args=(chunks, version, book), daemon=True,
                                 name="address-book").start()
            except RuntimeError:  # no thread to be had: prefiltered meanwhile, asked again at the next search
                self._book_reading.release()
        return None

    def _read_book(self, chunks: Table, version: int, old: AddressBook | None) -> None:
        try:
            dataset = chunks.to_lance()
            dataset = dataset if dataset.version == version else dataset.checkout_version(version)
            if not getattr(dataset, "has_stable_row_ids", False):  # else a _rowid is no address
                self._book = (chunks, AddressBook.read(dataset, old))
        except Exception as exc:  # noqa: BLE001 - a book is an optimisation: scoped searches prefilter meanwhile
            log.info("could not read the rows' address book (%s); scoped searches prefilter", exc)
        finally:
            self._book_reading.release()

    def vector_partitions(self, chunks: Table, index: Any) -> int:
        """The partitions of the vector `index` (a search probes a share of them: PROBED_SHARE). Counted once an
        index, beside the queries (counted_partitions): until then, the count of the index this one replaced (a
        fold changes it little), else the estimate for its rows (estimated_partitions)."""
        key = str(index.index_uuid)
        known = self._partitions.get(key)
        if known is not None:
            return known
        with self._partitions_lock:
            first = key not in self._partitions_asked
            self._partitions_asked = {*list(self._partitions_asked)[-63:], key} if first else self._partitions_asked
        if first:
            threading.Thread(target=self._count_partitions, args=(chunks, index, key), daemon=True,
                             name="vector-partitions").start()
        return next(reversed(self._partitions.values()), None) or estimated_partitions(index)

    def _count_partitions(self, chunks: Table, index: Any, key: str) -> None:
        try:
            counted = counted_partitions(chunks, index)
        except Exception as exc:  # noqa: BLE001 - a count is an optimisation: the estimate serves meanwhile
            log.info("could not count the vector index's partitions (%s); its rows' estimate serves", exc)
            return
        if counted:  # a few indexes' counts kept: each fold makes another
            self._partitions = {**dict(list(self._partitions.items())[-7:]), key: counted}

    def vector_search(self, vector: Sequence[float] | np.ndarray, limit: int, where: Filter | None,
                      columns: list[str]) -> list[dict[str, Any]]:
        return list(self.vector_side(vector, limit, where, columns).rows)

    @guarded
    def similarities(self, vector: Sequence[float] | np.ndarray, ids: Sequence[str],
                     carried: Mapping[str, Any] | None = None) -> dict[str, float]:
        """Cosine similarity of the chunks `ids` to `vector` (chunks that are gone are left out); `carried` holds
        vectors by id that came with a ranked list, read again for no chunk."""
        query = unit(vector)
        vectors = {i: v for i in ids if (v := carried.get(i)) is not None} if carried else {}
        found: dict[str, float] = {}
        if vectors:  # one product for all of them: one unit() and dot a chunk cost ~20 us, ~3 ms a 1M query
            matrix = unit_rows(np.stack([np.asarray(v, dtype=np.float32) for v in vectors.values()]))
            found = dict(zip(vectors, (matrix @ query).tolist(), strict=True))
        missing = [i for i in ids if i not in found]
        chunks = self.tables.chunks()
        if chunks is None or not missing:
            return found
        replica = self._current_replica(chunks, ["id"])
        if replica is not None:
            return found | {i: float(replica.matrix[replica.by_id[i]] @ query) for i in missing if i in replica.by_id}
        rows = self.chunk_rows(in_list("id", missing), ["id", "vector"])
        return found | {r["id"]: float(unit(r["vector"]) @ query) for r in rows}

    @guarded
    def rank_columns(self, columns: list[str]) -> list[str]:
        """What a query's ranked lists read: `columns` where the replica serves (it knows each row's language,
        passage_languages, and its passage, passage_bodies), with the passage (text, body_start) and the stored
        language where LanceDB ranks: there they come with the ranking, and reading the candidates' texts again by
        id would be one more filtered scan at every query."""
        chunks = self.tables.chunks()
        if chunks is None or self._current_replica(chunks, columns) is not None:
            return columns
        return [*columns, "text", "body_start", *(["lang"] if self.tables.languages_stored else [])]

    def passage_languages(self, rows: Sequence[Mapping[str, Any]],
                          detect: Callable[[str], str | None]) -> dict[str, str | None]:
        """The language of each ranked row's passage, by id (chunks that are gone are left out): the one stored with
        the row where it carries it (`lang`, what `detect` read when it was written: tables.stored_language), else
        what `detect` reads in the text it carries, else in the replica's (which detects each row's once:
        Replica.languages_of) or in the text read by id. Stored, ~300 candidates' languages cost no Python at a
        query; detected, ~6 ms."""
        found: dict[str, str | None] = {}
        for row in rows:
            if row.get("lang") is not None:
                found[row["id"]] = row["lang"] or None
            elif row.get("text") is not None:
                found[row["id"]] = detect(row["text"])
        missing = [row["id"] for row in rows if row["id"] not in found]
        chunks = self.tables.chunks()
        if chunks is None or not missing:
            return found
        replica = self._current_replica(chunks, ["id", "text"])
        found |= replica.languages_of(missing, detect) if replica is not None else {}
        missing = [i for i in missing if i not in found]
        for start in range(0, len(missing), IN_BATCH):
            read = self.chunk_rows(in_list("id", missing[start:start + IN_BATCH]), ["id", "text"])
            found.update({row["id"]: detect(row["text"] or "") for row in read})
        return found

    def section_chunks(self, parent_ids: Sequence[str], also: Sequence[str] = ()) -> list[StoredChunk]:
        """Every chunk of the given sections, and the chunks `also` (by id) wherever they lie, in document order."""
        return [StoredChunk.of(row) for row in self.section_rows(parent_ids, STORED_CHUNK_COLUMNS, also)]

    @guarded
    def section_rows(self, parent_ids: Sequence[str], columns: list[str],
                     also: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Every chunk of the given sections and the chunks `also`, each once, ordered like chunk_rows."""
        chunks = self.tables.chunks()
        if chunks is None or not (parent_ids or also):
            return []
        replica = self._current_replica(chunks, columns)
        if replica is None:
            wanted = [in_list(column, values) for column, values in (("parent_id", parent_ids), ("id", also))
                      if values]
            return self.chunk_rows(" OR ".join(f"({w})" for w in wanted), columns)
        return in_document_order(replica.in_sections(parent_ids, columns, also))

    @guarded
    def passage_bodies(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """Each ranked row's own passage (its text after `body_start`), by id, for telling copies apart: from the
        row where it carries its text (rank_columns), else from the replica, else read by id; chunks that are
        gone are left out."""
        found = {r["id"]: body_of(r["text"], r.get("body_start")) for r in rows if r.get("text") is not None}
        missing = [r["id"] for r in rows if r["id"] not in found]
        chunks = self.tables.chunks()
        if chunks is None or not missing:
            return found
        replica = self._current_replica(chunks, ["id", "text", "body_start"])
        read = replica.in_sections((), ["id", "text", "body_start"], missing) if replica is not None else [
            row for start in range(0, len(missing), IN_BATCH)
            for row in self.chunk_rows(in_list("id", missing[start:start + IN_BATCH]), ["id", "text", "body_start"])]
        return found | {r["id"]: body_of(r["text"], r["body_start"]) for r in read}

    def query_path(self, rows: int) -> Literal["memory", "index"]:
        """How an index of `rows` chunks is ranked: "memory" (the exact in-memory replica, when it fits
        the memory budget) or "index" (LanceDB's indexes). Chosen again at every query, so an index
        that grows past the budget switches without a restart."""
        return "memory" if fits(rows, self.tables.dim, self.tables.memory_budget) else "index"

    def _current_replica(self, chunks: Table, columns: list[str]) -> Replica | None:
        """The in-memory replica of the table's current version (refreshed after a commit), or of the version
        this thread's query_view holds; None when too large."""
        view = self._view_of(chunks)
        replica = view.replica if view is not None else self._replica_at(chunks, chunks.version)
        return replica if replica is not None and replica.serves(columns) else None

    def _replica_at(self, chunks: Table, version: int) -> Replica | None:
        replica = self._replica
        if replica is None and self._too_large == (chunks, version):
            return None  # known: no count of rows (a round trip, under the lock) at every read of a query
        if replica is None or replica.version != version:
            with self._replica_lock:
                replica = self._replica
                if replica is None or replica.version != version:
                    self._replica = replica = self._read_replica(chunks, version, replica)
                self._too_large = (chunks, version) if replica is None else None
        return replica

    def _read_replica(self, chunks: Table, version: int, old: Replica | None) -> Replica | None:
        """Refresh `old` to `version` reading only the rows it does not hold, or read the table whole.

        Read after the version: the data is at least that new, so a later commit only costs
        another refresh. The whole table is read the first time, after a schema change, and
        when a commit lands between the key scan and the read of the missing rows. The whole read has no
        deadline: in a bucket its time grows with the table (up to the memory budget), not with requests.
        """
        deadline = self.tables.deadline
        if not fits(chunks.count_rows(), self.tables.dim, self.tables.memory_budget):
            return None
        names = [n for n in chunks.schema.names if n not in ("keywords", "metadata", "embed_key")]
        if old is not None and old.rows.column_names == [n for n in names if n != "vector"]:
            keys = chunks.search().select(KEY_COLUMNS).with_row_id(True).limit(None).to_arrow(timeout=deadline)
            try:
                fresh, read = old.refreshed(version, keys, lambda ids: (
                    chunks.take_row_ids(ids).select(names).with_row_id().to_arrow(timeout=deadline)))
                self.replica_rows_read += read
                return fresh
            except LookupError:
                log.info("rows changed while the replica refreshed; reading the table whole")
        table = chunks.search().select(names).with_row_id(True).limit(None).to_arrow()
        self.replica_rows_read += table.num_rows
        return Replica.from_arrow(version, table)

    @guarded
    def keyword_side(self, terms: str | Mapping[str, float], limit: int, where: Filter | None,
                     columns: list[str], other_than: str | None = None) -> Side:
        """The `limit` best BM25 matches of `terms` inside `where`, best first (ties by id), with `_score`.
        `terms` is a space-separated OR query, or weighted terms (term -> boost). With `other_than` (a language
        code), only passages whose stored language is another of languages.LANGUAGES are searched (and those
        without one, written by an older version), and the side's scale is theirs (other_languages); every
        passage where the table holds no languages (Tables.languages_stored).

        BM25's statistics (document frequencies, average length) are the whole index's,
        whatever the filter: LanceDB's prefilter only hides rows, so a chunk's raw score is
        the same with or without a scope; only the scale, the candidates' own, differs.
        """
        chunks = self.tables.chunks()
        if chunks is None or not terms:
            return Side([], 0.0, 0.0)
        replica = self._replica  # any version: it serves only the rows it holds as they are (_bm25)
        deadline = self.tables.deadline
        among = None
        if other_than is not None and self.tables.languages_stored:
            among = other_languages(other_than)
            if (vocabulary := self.foreign_vocabulary(chunks, other_than)) is not None:
                terms = _within(terms, vocabulary)
                if not terms:
                    return Side([], 0.0, 0.0)
        cards = self.tables.cards_stored
        return _masked(lambda w, cols: _bm25(chunks, terms, limit, w, cols, replica, deadline=deadline, among=among,
                                             cards=cards),
                       limit, where, columns, "_score", keeps_everything=self._keeps_everything(where))

    @guarded
    def foreign_vocabulary(self, chunks: Table, language: str) -> frozenset[str] | None:
        """Every term of the passages outside `language` (other_languages), while they are at most
        FOREIGN_VOCABULARY_ROWS, else None; read once a version and language.

        A term none of them holds adds nothing to any of their scores, so a translated list searched without it
        ranks them the same. LanceDB answers a query of weighted terms (a BooleanQuery) by scoring every
        posting of every term before its filter, so in an index of one language with a few stray passages in
        another, the translated list cost as much as the question's own (at 1M chunks, 12 ms p50 and 33 ms p95)
        to find almost nothing; pruned, most such lists are never searched."""
        version, known = self._version(chunks), self._vocabularies  # replaced whole, never changed: threads share it
        key = (version, language)
        if key in known:
            return known[key]
        vocabulary, among = None, other_languages(language)
        if self.tables.count_rows(chunks, among) <= FOREIGN_VOCABULARY_ROWS:
            found = (chunks.search().where(among).select([FTS_COLUMN]).limit(None)
                     .to_arrow(timeout=self.tables.deadline).column(FTS_COLUMN).to_pylist())
            vocabulary = frozenset(term for keywords in found if keywords for term in keywords.split())
        self._vocabularies = {**{k: v for k, v in known.items() if k[0] == version}, key: vocabulary}
        return vocabulary

    def _keeps_everything(self, where: Filter | None) -> bool:
        """Whether `where` keeps every chunk of the replica last read, or where there is none of the address book
        last read (whatever their version: a guess that only decides whether a filtered side first tries the
        cheaper unfiltered search: _masked). A scope of the whole folder indexed is common."""
        if where is None:
            return False
        replica, held = self._replica, self._book
        if replica is not None:
            return bool(replica.mask(where).all())
        return held is not None and held[1].keeps_everything(where)

    def keyword_search(self, terms: str, limit: int, where: Filter | None,
                       columns: list[str]) -> list[dict[str, Any]]:
        return list(self.keyword_side(terms, limit, where, columns).rows)

    @guarded
    def chunk_rows(self, where: str, columns: list[str], limit: int | None = None) -> list[dict[str, Any]]:
        chunks = self.tables.chunks()
        if chunks is None:
            return []
        query = chunks.search().where(where)
        query = query.limit(limit) if limit else query.limit(None)
        return in_document_order(_listed(query, columns, self.tables.cards_stored, self.tables.deadline))

    @guarded
    def vectors_by_key(self, keys: Sequence[str], model_id: str, scheme: str) -> dict[str, Any]:
        """{embed_key: vector} for the rows embedded by `model_id` under `scheme` that hold one of `keys` (read
        `IN_BATCH` keys at a time, through the key's B-tree once it exists)."""
        chunks = self.tables.chunks()
        found: dict[str, Any] = {}
        where = _embedded_by(model_id, scheme)
        if chunks is None:
            return found
        for start in range(0, len(keys), IN_BATCH):
            table = (chunks.search().where(f"({in_list('embed_key', keys[start:start + IN_BATCH])}) AND ({where})")
                     .select(["embed_key", "vector"]).limit(None).to_arrow(timeout=self.tables.deadline))
            if table.num_rows:
                vectors = table.column("vector").combine_chunks()
                matrix = vectors.flatten().to_numpy(zero_copy_only=False).reshape(-1, vectors.type.list_size)
                found.update(zip(table.column("embed_key").to_pylist(), matrix, strict=False))
        return found

    def unkeyed_chunks(self, model_id: str, scheme: str, columns: list[str]) -> list[dict[str, Any]]:
        """Rows embedded by `model_id` under `scheme` before `embed_key` existed (it is null there)."""
        return self.chunk_rows(f"embed_key IS NULL AND ({_embedded_by(model_id, scheme)})", columns)

    def chunks_by_id(self, ids: Sequence[str], model_id: str, scheme: str, columns: list[str]) -> list[dict[str, Any]]:
        """The rows `ids` that are still embedded by `model_id` under `scheme` (read `IN_BATCH` at a time)."""
        where = _embedded_by(model_id, scheme)
        return [row for start in range(0, len(ids), IN_BATCH)
                for row in self.chunk_rows(f"({in_list('id', ids[start:start + IN_BATCH])}) AND ({where})", columns)]

    def _stored_chunks(self, where: str) -> list[StoredChunk]:
        return [StoredChunk.of(row) for row in self.chunk_rows(where, STORED_CHUNK_COLUMNS)]

    def document_chunks(self, source_id: str) -> list[StoredChunk]:
        """Every chunk of one document, in document order."""
        return self._stored_chunks(f"source_id = {sql_str(source_id)}")

    def chunks_around(self, source_id: str, first: int, last: int) -> dict[int, StoredChunk]:
        """The chunks `first`..`last` (inclusive) of one document that exist, by chunk index."""
        where = f"source_id = {sql_str(source_id)} AND chunk_index >= {first} AND chunk_index <= {last}"
        return {c.chunk_index: c for c in self._stored_chunks(where)}

    def chunks_by_source(self, source_ids: Sequence[str] | None) -> dict[str, list[StoredChunk]]:
        """{source id: its chunks in document order} for `source_ids` (read `IN_BATCH` at a time), or, with
        None, for every ingest_data and URL item (the documents a rebuild from disk cannot bring back)."""
        if source_ids is None:
            chunks = self._stored_chunks("source_kind != 'file'")
        else:
            chunks = [c for start in range(0, len(source_ids), IN_BATCH)
                      for c in self._stored_chunks(in_list("source_id", source_ids[start:start + IN_BATCH]))]
        by_source: dict[str, list[StoredChunk]] = {}
        for chunk in chunks:
            by_source.setdefault(chunk.source_id, []).append(chunk)
        return by_source
