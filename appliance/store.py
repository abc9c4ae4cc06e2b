"""The LanceDB index: the only module that imports lancedb.

Two tables live in DB_PATH. `chunks` holds one row per retrieval unit with its
vector (cosine distance on L2-normalised vectors, said explicitly on every
search) and a pre-analysed `keywords` column under a BM25 index. `sources`
holds one row per document (file, data item or URL), including documents that
failed or produced no chunks, so a sync can decide what to skip without
touching `chunks`. `identity.json` records what the index was built with.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Concatenate, Literal, NoReturn, ParamSpec, TypeVar, overload

import numpy as np

from appliance.lean import pandas_hidden

with pandas_hidden():  # pyarrow.dataset probes for pandas on import; nothing here uses it
    import lancedb
    import pyarrow as pa
    from lancedb.index import FTS, BTree, IvfHnswSq
    from lancedb.query import BooleanQuery, FullTextOperator, MatchQuery, Occur
    from lancedb.table import Table

from appliance import native_memory, replica as replica_module, stopping
from appliance.chunks import STORED_CHUNK_COLUMNS, Chunk, StoredChunk
from appliance.errors import CONFLICT_ATTEMPTS, IndexCorrupt, is_commit_conflict, storage_error
from appliance.query.filters import Filter
from appliance.query.hybrid import Side
from appliance.replica import KEY_COLUMNS, Replica, unit
from appliance.swap import replace_chunks

CHUNKS = "chunks"
SOURCES = "sources"
IDENTITY_FILE = "identity.json"
FTS_COLUMN = "keywords"
VECTOR_INDEX_MIN_ROWS = 5000
"""Below this many rows a flat scan beats any vector index, whatever the replica's budget."""
VECTOR_SEGMENTS_MAX = 8
VECTOR_SEGMENTS_MAX_MID_RUN = 32
"""A fold adds the new rows to the vector index as a segment (an HNSW graph) of its own, and every query
searches every segment: at 1M chunks the 86 segments a build had left took 109 of a 120 ms vector search,
one segment 22 ms (scripts/bench_scale.py). A refresh finds more than VECTOR_SEGMENTS_MAX and rebuilds the
index as one (8.5 min at 1M chunks on 2 cores), so a query pays at most ~10 ms for segments; inside a
long run, which folds every FOLD_EVERY_ROWS, only past VECTOR_SEGMENTS_MAX_MID_RUN, so a sync of 1M chunks
rebuilds a few times (once per ~320,000 rows), not once per 80,000."""
VECTOR_INDEX = IvfHnswSq(distance_type="cosine")
EF_SEARCH = 3200
"""Candidates an approximate search explores, shared out over the vector index's segments. LanceDB's
default (the number asked for) found 0.48 of the true 10 nearest in one segment of 1M chunks; 1,600
found 0.92 and 3,200 0.97 in 15-24 ms (scripts/bench_scale.py's vectors, mixes of real ones with noise:
harder to tell apart than a real corpus's, so a real index fares no worse)."""
EF_SEARCH_FILTERED = 800
"""The same for a prefiltered search, which explores until it has that many candidates inside the filter:
scoped to a folder of 100,000 of the 1M chunks, 800 found 0.967 of the exact top 10 inside it in 71 ms
p50, 3,200 0.997 in 154 ms, an exact scan of the folder 183 ms."""
REFINE_FACTOR = 4
"""An approximate vector search re-ranks this many times `limit` of the index's candidates on the
stored vectors, so every distance it returns is exact and a chunk's score does not depend on the filter."""
TIE_MARGIN = 8
"""Rows a LanceDB search returns beyond the limit, so rows tied at the cut are chosen by id, not by storage order."""
_IN_BATCH = 200
READ_CONSISTENCY_S = 1.0
"""A table handle re-reads the latest commit at most this long after another process made it,
so `status`, `list_files` and reads see other writers within that bound (queries check at once)."""

METADATA_CACHE_BYTES = 16 << 20
"""LanceDB's cache of manifests and file footers, bounded: by default it keeps every version a process
has seen, and a sync commits two or three versions per write, each manifest listing every fragment so
far (scripts/bench_sync_rss.py probes: 113 MB over 20,000 files, ~5 KB a file; at this cap a fold took
as long as uncapped, 1.4 s at 10,000 rows). The indexes' own cache keeps LanceDB's default."""
native_memory.bound_malloc()  # before LanceDB starts its threads: see native_memory

OPTIMIZE_ATTEMPTS = 3
FOLD_EVERY_ROWS = 10_000
"""A long write run (one sync of many files) folds its new rows into the indexes after this many:
a delete by source id, a key lookup and a source upsert scan the rows no index covers yet, so
without it each write of a sync costs more than the one before (scripts/bench_scale.py --flat:
at 20,000 unindexed rows a write's delete took 1.2 s and its key lookup 1.4 s; a fold that
extends existing indexes by 1,000 rows took 3-4.5 s at 23,000 rows, compacting only the new rows)."""
FOLD_DUE_ROWS = 1_000
FOLD_DUE_FRAGMENTS = 20
"""A write folds (compacts and extends the indexes) only once a table has this many rows outside
its indexes or this many fragments: a fold costs ~0.5 s however few rows it adds (a quarter of a
10-file `minirag sync`, and seconds at 100k chunks), while searches scan a few hundred unindexed
rows in well under a millisecond and LanceDB itself advises optimizing after ~20 writes."""
log = logging.getLogger(__name__)


def chunk_schema(dim: int) -> pa.Schema:
    """Everything kept per chunk, so later features add behaviour, not migrations."""
    return pa.schema([
        pa.field("id", pa.string(), nullable=False),
        pa.field("source_id", pa.string(), nullable=False),
        pa.field("source_kind", pa.string()),        # file | data | url
        pa.field("root", pa.string()),
        pa.field("path", pa.string()),               # display path, relative to its root
        pa.field("chunk_index", pa.int32()),
        pa.field("text", pa.string()),
        pa.field("body_start", pa.int32()),
        pa.field("keywords", pa.string()),
        pa.field("title", pa.string()),
        pa.field("parent_id", pa.string()),
        pa.field("heading", pa.string()),
        pa.field("start_line", pa.int32()),
        pa.field("end_line", pa.int32()),
        pa.field("page_start", pa.int32()),          # PDF pages, slide number, sheet name: where to cite
        pa.field("page_end", pa.int32()),
        pa.field("slide", pa.int32()),
        pa.field("sheet", pa.string()),
        pa.field("content_hash", pa.string()),
        pa.field("mtime_ns", pa.int64()),
        pa.field("size", pa.int64()),
        pa.field("scheme", pa.string()),
        pa.field("model_id", pa.string()),
        pa.field("ingested_at", pa.float64()),
        pa.field("ocr_engine", pa.string()),
        pa.field("doc_class", pa.string()),
        pa.field("snapshot_date", pa.string()),
        pa.field("also_unchanged_on", pa.list_(pa.string())),
        pa.field("metadata", pa.string()),            # JSON object
        pa.field("vector", pa.list_(pa.float32(), dim)),
        pa.field("embed_key", pa.string()),          # reuse.embed_key of the text the vector is of
    ])


SOURCE_SCHEMA = pa.schema([
    pa.field("source_id", pa.string(), nullable=False),
    pa.field("source_kind", pa.string()),
    pa.field("root", pa.string()),
    pa.field("path", pa.string()),
    pa.field("title", pa.string()),
    pa.field("content_hash", pa.string()),
    pa.field("mtime_ns", pa.int64()),
    pa.field("size", pa.int64()),
    pa.field("scheme", pa.string()),
    pa.field("model_id", pa.string()),
    pa.field("chunk_count", pa.int32()),
    pa.field("ingested_at", pa.float64()),
    pa.field("ocr_engine", pa.string()),
    pa.field("doc_class", pa.string()),
    pa.field("metadata", pa.string()),
    pa.field("error_code", pa.string()),             # "" when the source is indexed
    pa.field("error", pa.string()),
])


@dataclass(frozen=True)
class SourceRow:
    """One document as the index knows it."""

    source_id: str
    source_kind: str
    root: str = ""
    path: str = ""
    title: str = ""
    content_hash: str = ""
    mtime_ns: int = 0
    size: int = 0
    scheme: str = ""
    model_id: str = ""
    chunk_count: int = 0
    ingested_at: float = 0.0
    ocr_engine: str = ""
    doc_class: str = "note"
    metadata: str = "{}"
    error_code: str = ""
    error: str = ""


@dataclass(frozen=True)
class Identity:
    """What the vectors in this index mean; a mismatch forbids mixing."""

    model_id: str
    dim: int
    scheme: str
    budget: int
    created_at: float = field(default_factory=time.time)


FIELD_DEFAULTS = {"doc_class": "'note'", "ocr_engine": "''", "metadata": "'{}'", "error_code": "''", "error": "''"}
"""Values a field added by a newer version takes on rows written before it existed."""


def _open_or_create(db: lancedb.DBConnection, name: str, schema: pa.Schema) -> Table:
    """Open a table (adding fields a newer version introduced), or create it empty."""
    try:
        table = db.open_table(name)
    except ValueError:  # lancedb's "table not found"
        return db.create_table(name, schema=schema, exist_ok=True)
    _evolve(table, schema)
    return table


def _evolve(table: Table, schema: pa.Schema) -> None:
    """Add fields a newer version introduced to an existing table, in place.

    Existing rows keep their vectors; new fields start as null and take their
    default where one is defined, so an upgrade never re-embeds anything.
    """
    have = set(table.schema.names)
    missing = [f for f in schema if f.name not in have]
    if not missing:
        return
    table.add_columns(missing)
    for f in missing:
        if f.name in FIELD_DEFAULTS:
            table.update(where=f"{f.name} IS NULL", values_sql={f.name: FIELD_DEFAULTS[f.name]})


def _open_error(exc: Exception, table: str, db_path: Path) -> Exception:
    return storage_error(exc, f"the {table} table in {db_path}", db_path) or IndexCorrupt(
        f"Cannot open the {table} table in {db_path}: {exc}")


def sql_str(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def filter_sql(where: Filter) -> str | None:
    """The prefilter selecting the rows `where.keeps` passes."""
    clauses = []
    if where.prefix is not None:
        clauses.append(f"source_id = {sql_str(where.prefix)} OR starts_with(source_id, {sql_str(where.folder)})")
    if where.doc_class is not None:
        clauses.append(f"doc_class = {sql_str(where.doc_class)}")
    return " AND ".join(f"({c})" for c in clauses) or None


def in_list(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(sql_str(v) for v in values)})"


def _embedded_by(model_id: str, scheme: str) -> str:
    """Rows whose vectors the model `model_id` made from chunks cut by `scheme`."""
    return f"model_id = {sql_str(model_id)} AND scheme = {sql_str(scheme)}"


def chunk_row(source: SourceRow, chunk: Chunk, *, key: str, has_lines: bool, keywords: str, embed_key: str,
              snapshot_date: str | None = None, also_unchanged_on: Sequence[str] = ()) -> dict[str, Any]:
    """The `chunks` row (chunk_schema) of `chunk` of the indexed `source`; its vector comes from the embedder.

    `key` names the source in chunk and section ids; `has_lines` says whether the chunk's
    line numbers are the source file's (else they are stored as null)."""
    return {
        "id": f"{key}:{chunk.index}", "source_id": source.source_id, "source_kind": source.source_kind,
        "root": source.root, "path": source.path, "chunk_index": chunk.index, "text": chunk.text,
        "body_start": chunk.body_start, "keywords": keywords,
        "title": source.title, "parent_id": f"{key}:s{chunk.section}", "heading": chunk.heading,
        "start_line": chunk.start_line if has_lines else None,
        "end_line": chunk.end_line if has_lines else None,
        "page_start": chunk.page_start, "page_end": chunk.page_end, "slide": chunk.slide, "sheet": chunk.sheet,
        "content_hash": source.content_hash, "mtime_ns": source.mtime_ns, "size": source.size,
        "scheme": source.scheme, "model_id": source.model_id, "ingested_at": source.ingested_at,
        "ocr_engine": source.ocr_engine, "doc_class": source.doc_class, "snapshot_date": snapshot_date,
        "also_unchanged_on": list(also_unchanged_on), "metadata": source.metadata, "embed_key": embed_key,
    }


_P = ParamSpec("_P")
_R = TypeVar("_R")
IndexMethod = Callable[Concatenate["Index", _P], _R]
"""A method of Index, as the decorators below take and return it."""


def _guarded(method: IndexMethod[_P, _R]) -> IndexMethod[_P, _R]:
    """Report a failed read or write of the index as its named error (disk full, read-only, damaged)."""
    @functools.wraps(method)
    def wrapper(self: Index, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - raised again, as its named error or as it is
            _raise_named(self.db_path, exc)
    return wrapper


def _raise_named(db_path: Path, exc: Exception) -> NoReturn:
    """Raise `exc` as its named storage error (disk full, read-only, busy, damaged), or as it is."""
    named = storage_error(exc, f"the index at {db_path}", db_path)
    if named is None or named is exc:
        raise exc
    raise named from exc


def _backoff(attempt: int) -> None:
    """Wait before repeating a write that lost a commit race: doubling, jittered, at most ~3 s."""
    time.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random()))


def _writes(method: IndexMethod[_P, _R]) -> IndexMethod[_P, _R]:
    """A write that retries when another process committed first (LanceDB's retryable
    commit conflict), with jittered backoff, then reports a failure by its name.

    Every write method is idempotent as a whole (deletes by id, then adds, then upserts),
    so repeating it after a lost race is safe; other processes writing is normal: the
    scheduler, the MCP server and a CLI share one index.
    """
    @functools.wraps(method)
    def wrapper(self: Index, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - retried when a lost commit race, else raised again
                if not is_commit_conflict(exc) or attempt == CONFLICT_ATTEMPTS:
                    _raise_named(self.db_path, exc)
                self.conflicts_retried += 1
                log.info("%s lost a commit race to another process (attempt %d); retrying", method.__name__, attempt)
                _backoff(attempt)
                with contextlib.suppress(Exception):  # the next attempt reports whatever is wrong
                    self._refresh_handles()
        raise AssertionError("unreachable")
    return wrapper


def needs_vector_index(rows: int, dim: int) -> bool:
    """Whether an index of `rows` rows gets an approximate vector index: only once queries rank it
    through LanceDB, past the in-memory replica's budget (replica.fits). Below that the replica
    scans every vector exactly and an index would only be upkeep: updating it was ~80 % of a fold
    (~8 of ~10 s for 10,000 new rows, on tables of 10,000-100,000 rows). A process with a smaller
    memory budget than the writer's serves an unindexed table by LanceDB's flat scan: exact, slower."""
    return rows >= VECTOR_INDEX_MIN_ROWS and not replica_module.fits(rows, dim)


def _fold_due(table: Table) -> bool:
    """Whether a table has enough rows outside its indexes, or fragments, to fold (FOLD_DUE_ROWS)."""
    stats: Any = table.stats()  # a dict from lancedb 0.40's native side, whatever its annotation says
    if stats["fragment_stats"]["num_fragments"] >= FOLD_DUE_FRAGMENTS:
        return True
    return any((covered := table.index_stats(index.name)) is not None and covered.num_unindexed_rows >= FOLD_DUE_ROWS
               for index in table.list_indices())


def _in_document_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows.sort(key=lambda r: (r.get("source_id", ""), r.get("chunk_index", 0)))
    return rows


def _vector_index(chunks: Table) -> Any:
    """The chunks table's vector index (LanceDB's IndexConfig), or None."""
    return next((i for i in chunks.list_indices() if tuple(i.columns) == ("vector",)), None)


def _nearest(chunks, vector: Sequence[float] | np.ndarray, limit: int, where: Filter | None,  # type: ignore[no-untyped-def]
             columns: list[str], segments: int) -> list[dict[str, Any]]:
    """LanceDB's nearest chunks with exact distances (the vector index's candidates re-ranked on the
    stored vectors), ties by id; the filtered and the unfiltered search use the same index the same way.
    The candidates explored (EF_SEARCH) are shared out over the index's `segments`."""
    query = chunks.search(list(vector), vector_column_name="vector").distance_type("cosine")
    explore = EF_SEARCH if where is None else EF_SEARCH_FILTERED
    query = query.refine_factor(REFINE_FACTOR).ef(max((limit + TIE_MARGIN) * REFINE_FACTOR, explore // segments))
    if where is not None:
        query = query.where(filter_sql(where), prefilter=True)
    rows = query.select(sorted(set(columns) | {"id", "_distance"})).limit(limit + TIE_MARGIN).to_list()
    return sorted(rows, key=lambda r: (r["_distance"], r["id"]))[:limit]


def _fts_query(terms: str | Mapping[str, float]) -> str | BooleanQuery:
    """A plain OR query of terms, or one of weighted terms (the cross-language synonym sets, appliance.crosslingual)."""
    if isinstance(terms, str):
        return terms
    return BooleanQuery([(Occur.SHOULD, MatchQuery(term, FTS_COLUMN, boost=boost, fuzziness=0, max_expansions=50,
                                                   operator=FullTextOperator.OR, prefix_length=0,
                                                   document_granularity=None))
                         for term, boost in sorted(terms.items())])


def _bm25(chunks, terms: str | Mapping[str, float], limit: int, where: Filter | None,  # type: ignore[no-untyped-def]
          columns: list[str], replica: Replica | None = None) -> list[dict[str, Any]]:
    """LanceDB's best BM25 matches, ties by id. With a `replica` that serves `columns`, the search returns only
    each match's address and score and the replica gives the rest (at 100,000 chunks BM25 takes half the
    time it takes when it reads the matches' columns off disk), unless it does not hold some match's
    address (a row written or moved since it was read): then as without."""
    def search() -> Any:
        query = chunks.search(_fts_query(terms), query_type="fts", fts_columns=FTS_COLUMN)
        return query.where(filter_sql(where), prefilter=True) if where is not None else query

    rows = None
    if replica is not None and replica.serves(columns):
        found = search().select(["_score"]).with_row_id(True).limit(limit + TIE_MARGIN).to_arrow()
        rows = replica.rows_at_addresses(found, columns)
    if rows is None:
        rows = search().select([*sorted(set(columns) | {"id"}), "_score"]).limit(limit + TIE_MARGIN).to_list()
    return sorted(rows, key=lambda r: (-r["_score"], r["id"]))[:limit]


_PREFILTERED = ThreadPoolExecutor(max_workers=2, thread_name_prefix="prefiltered")
"""Runs a filtered side's prefiltered search beside its unfiltered one (a pool of its own: the sides
themselves run in searching's pool, and a task waiting on its own pool could starve it)."""


def _masked(search, limit: int, where: Filter | None, columns: list[str], key: str,  # type: ignore[no-untyped-def]
            speculate: bool = True) -> Side:
    """One side through LanceDB: the unfiltered candidates give the scale; the filtered ones are
    those among them that `where` keeps when that is all of them or nothing deeper matches, else
    a prefiltered search (so a filter never truncates: deeper chunks inside it are found).

    Unless the filter keeps every chunk, one of the unfiltered candidates nearly always lies outside
    it, so with `speculate` the prefiltered search starts at once beside the unfiltered one instead
    of after it (at 100,000 chunks each BM25 search took 5-6 ms p50, the prefiltered one no more than the
    other, at load 4.6), and is dropped when not needed."""
    if where is None:
        return Side.whole(search(None, columns), key)
    filtered = _PREFILTERED.submit(search, where, columns) if speculate else None
    whole = search(None, sorted(set(columns) | set(Filter.COLUMNS)))
    side = Side.whole(whole, key)
    inside = [r for r in whole if where.keeps(r)]
    if len(inside) < limit <= len(whole):
        inside = filtered.result() if filtered is not None else search(where, columns)
    elif filtered is not None:
        filtered.cancel()  # when already running, it ends on its own and its rows are dropped
    return Side(inside, side.best, side.floor)


class Index:
    """Read and write access to one DB_PATH. Safe to share between threads."""

    def __init__(self, db_path: Path, dim: int) -> None:
        self.db_path = db_path
        self.dim = dim
        self._lock = threading.RLock()
        self._db: lancedb.DBConnection | None = None
        self._chunks: Table | None = None
        self._sources: Table | None = None
        self._replica: Replica | None = None
        self._replica_lock = threading.Lock()
        self._pinned = threading.local()
        """This thread's `query_view`: (the chunks handle, its replica or None), while one is open."""
        self.conflicts_retried = 0
        """Writes of this process that lost a commit race and were repeated."""
        self.replica_rows_read = 0
        """Rows the replica read in full so far (a refresh reads only the rows it does not hold)."""
        self.rows_unfolded = 0
        """Chunk rows this process added since it last folded rows into the indexes."""

    # ---- opening -------------------------------------------------------
    def _connect(self) -> lancedb.DBConnection:
        if self._db is None:
            self.db_path.mkdir(parents=True, exist_ok=True)
            self._db = lancedb.connect(str(self.db_path),
                                       read_consistency_interval=timedelta(seconds=READ_CONSISTENCY_S),
                                       session=lancedb.Session(metadata_cache_size_bytes=METADATA_CACHE_BYTES))
        return self._db

    def exists(self) -> bool:
        return (self.db_path / f"{CHUNKS}.lance").exists()

    @overload
    def chunks(self, create: Literal[True]) -> Table: ...
    @overload
    def chunks(self, create: bool = False) -> Table | None: ...
    def chunks(self, create: bool = False) -> Table | None:
        if self._chunks is not None:  # open already: readers never wait for a writer's lock
            return self._chunks
        with self._lock:
            if self._chunks is None:
                if not create and not self.exists():
                    return None
                db = self._connect()
                try:
                    self._chunks = _open_or_create(db, CHUNKS, chunk_schema(self.dim))
                except Exception as exc:  # lancedb raises plain errors for damaged datasets
                    raise _open_error(exc, CHUNKS, self.db_path) from exc
            return self._chunks

    @overload
    def sources(self, create: Literal[True]) -> Table: ...
    @overload
    def sources(self, create: bool = False) -> Table | None: ...
    def sources(self, create: bool = False) -> Table | None:
        if self._sources is not None:
            return self._sources
        with self._lock:
            if self._sources is None:
                if not create and not (self.db_path / f"{SOURCES}.lance").exists():
                    return None
                try:
                    self._sources = _open_or_create(self._connect(), SOURCES, SOURCE_SCHEMA)
                except Exception as exc:
                    raise _open_error(exc, SOURCES, self.db_path) from exc
            return self._sources

    @_guarded
    def checkout_latest(self) -> None:
        """See commits made by other processes (a sync running beside the server) now."""
        self._refresh_handles()

    @contextlib.contextmanager
    def query_view(self) -> Iterator[None]:
        """One query's reads: the latest commit of every process (checkout_latest), and inside the
        block every read the replica serves comes from that version's replica.

        The table's version is asked once here instead of at each read (every ask is a round trip
        through LanceDB's event loop thread, ~1 ms apiece on a quiet machine and several under load),
        and a commit landing mid-query cannot give its ranking and its sections two versions."""
        try:
            self._refresh_handles()
            chunks = self.chunks()
            view = (chunks, None if chunks is None else self._replica_at(chunks, chunks.version))
        except Exception as exc:  # noqa: BLE001 - raised again, as its named error or as it is
            _raise_named(self.db_path, exc)
        outer = getattr(self._pinned, "view", None)
        self._pinned.view = view
        try:
            yield
        finally:
            self._pinned.view = outer

    def _refresh_handles(self) -> None:
        for table in (self._chunks, self._sources):
            if table is not None:
                table.checkout_latest()

    # ---- identity ------------------------------------------------------
    @_guarded
    def read_identity(self) -> Identity | None:
        path = self.db_path / IDENTITY_FILE
        try:
            data = json.loads(path.read_text("utf-8"))
            return Identity(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise IndexCorrupt(f"{path} is unreadable: {exc}") from exc

    @_guarded
    def write_identity(self, identity: Identity) -> None:
        self.db_path.mkdir(parents=True, exist_ok=True)
        tmp = self.db_path / f".{IDENTITY_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(identity), indent=2), "utf-8")
        os.replace(tmp, self.db_path / IDENTITY_FILE)

    # ---- writing -------------------------------------------------------
    def replace_sources(self, sources: Sequence[SourceRow], rows: list[dict[str, Any]]) -> None:
        """Make `rows` the only chunks of `sources`, then record the sources.

        Each source's chunks are swapped in one commit (appliance/swap.py), so a
        concurrent query sees its old chunks or its new ones, never neither nor both. The `sources` row is
        written last: after a crash in between, the source looks unindexed and
        the next sync re-ingests it. Every FOLD_EVERY_ROWS rows a long run then
        folds its rows into the indexes, as a step of its own: a lost race while
        folding never repeats the committed write.
        """
        if not sources:
            return
        self._replace(sources, rows)
        self.rows_unfolded += len(rows)
        if self.rows_unfolded >= FOLD_EVERY_ROWS and not stopping.requested():
            # a stop leaves the folding to the next sync, as it does at the end
            self.refresh_indexes(fold_now=True, segments_max=VECTOR_SEGMENTS_MAX_MID_RUN)

    @_writes
    def _replace(self, sources: Sequence[SourceRow], rows: list[dict[str, Any]]) -> None:
        ids = [s.source_id for s in sources]
        with self._lock:
            replace_chunks(self.chunks(create=True), ids, rows, chunk_schema(self.dim),
                           lambda group: in_list("source_id", group))
            self._upsert_sources(sources)

    @_writes
    def record_sources(self, sources: Sequence[SourceRow]) -> None:
        """Update source rows without touching chunks (failures, metadata refresh)."""
        if sources:
            with self._lock:
                self._upsert_sources(sources)

    def _upsert_sources(self, sources: Sequence[SourceRow]) -> None:
        table = self.sources(create=True)
        data = pa.Table.from_pylist([asdict(s) for s in sources], schema=SOURCE_SCHEMA)
        (table.merge_insert("source_id").when_matched_update_all().when_not_matched_insert_all().execute(data))

    @_writes
    def delete_sources(self, ids: Sequence[str]) -> None:
        with self._lock:
            for table in (self.chunks(), self.sources()):
                if table is None:
                    continue
                for start in range(0, len(ids), _IN_BATCH):
                    table.delete(in_list("source_id", ids[start:start + _IN_BATCH]))

    @_writes
    def drop_all(self) -> None:
        """Empty both tables and remove the identity (sync --clean of a damaged index).

        A table Lance can still open gets an empty version of its own (an overwrite
        commit), so a reader in another process keeps reading the version it holds and
        sees the empty one at its next refresh; only a table that cannot be opened at
        all is removed from disk.
        """
        with self._lock:
            db = self._connect()
            for name, schema in ((CHUNKS, chunk_schema(self.dim)), (SOURCES, SOURCE_SCHEMA)):
                if not (self.db_path / f"{name}.lance").exists():
                    continue
                try:
                    db.create_table(name, schema=schema, mode="overwrite")
                except Exception as exc:
                    if is_commit_conflict(exc):
                        raise
                    shutil.rmtree(self.db_path / f"{name}.lance", ignore_errors=True)
            (self.db_path / IDENTITY_FILE).unlink(missing_ok=True)
            self._chunks = self._sources = self._replica = None

    @_guarded
    def read_everything(self) -> None:
        """Read every column of every row once (batch by batch), raising IndexCorrupt on damage."""
        for table in (self.chunks(), self.sources()):
            if table is not None:
                for _batch in table.search().limit(None).to_batches():
                    pass

    # ---- keeping the BM25 index whole ------------------------------------
    @_guarded
    def has_fts_index(self) -> bool:
        chunks = self.chunks()
        return chunks is not None and any(i.index_type == "FTS" for i in chunks.list_indices())

    @_writes
    def refresh_indexes(self, *, fold_now: bool = False, segments_max: int | None = None) -> None:
        """Build missing indexes once rows exist; fold new rows in when due (FOLD_DUE_ROWS), or at once
        (`fold_now`); rebuild the vector index as one once it has more than `segments_max` segments
        (VECTOR_SEGMENTS_MAX).

        BM25 over `keywords` (never stale: status reports rows it does not cover),
        B-trees on the id columns every read and delete filters on, and an HNSW
        vector index once queries go through LanceDB (needs_vector_index). Skipped
        when the process is stopping (the next sync builds what is missing; search
        covers unindexed rows meanwhile).
        """
        stopping.check()
        with self._lock:
            chunks = self.chunks()
            if chunks is None:
                return
            rows = chunks.count_rows()
            if rows == 0:
                return
            indices = chunks.list_indices()
            present = {tuple(i.columns) for i in indices}
            if (FTS_COLUMN,) not in present:
                chunks.create_index(FTS_COLUMN, config=FTS(
                    base_tokenizer="whitespace", lower_case=False, stem=False,
                    remove_stop_words=False, ascii_folding=False, with_position=False,
                    max_token_length=64,
                ))
            for column in ("id", "source_id", "parent_id", "embed_key"):
                if (column,) not in present:
                    chunks.create_index(column, config=BTree())
            if ("vector",) not in present and needs_vector_index(rows, self.dim):
                chunks.create_index("vector", config=VECTOR_INDEX)
            elif ("vector",) in present and not needs_vector_index(rows + rows // 4, self.dim):
                # well inside the replica's budget (a margin, so a table near it is not indexed and
                # dropped in turn): an index built earlier, or by an older version, is only upkeep
                chunks.drop_index(_vector_index(chunks).name)
            sources = self.sources()
            if sources is not None and not any(tuple(i.columns) == ("source_id",) for i in sources.list_indices()):
                sources.create_index("source_id", config=BTree())  # what a sync's upserts match on
            folded = [table for table in (chunks, self.sources())
                      if table is not None and (fold_now or _fold_due(table))]
            for table in folded:
                self._optimize(table)
            self._merge_vector_segments(chunks, VECTOR_SEGMENTS_MAX if segments_max is None else segments_max)
            if folded:
                if folded[0] is chunks:
                    self.rows_unfolded = 0
                native_memory.give_back()  # what the fold freed: see native_memory

    def _optimize(self, table: Table) -> None:
        """Compact and fold new rows into the indexes; losing this race to another process is no failure.

        Two processes that both just wrote compact the same fragments; the one that loses
        would redo what the winner did. After a few tries it leaves it: the next refresh
        (every write batch and every sync ends with one) folds whatever is left.
        """
        for attempt in range(1, OPTIMIZE_ATTEMPTS + 1):
            try:
                table.optimize()
                return
            except Exception as exc:
                if not is_commit_conflict(exc):
                    raise
                self.conflicts_retried += 1
                if attempt == OPTIMIZE_ATTEMPTS:
                    log.info("compaction lost %d commit races to other processes; left to the next refresh", attempt)
                    return
                _backoff(attempt)
                table.checkout_latest()

    def _merge_vector_segments(self, chunks: Table, segments_max: int) -> None:
        """Rebuild the vector index as one segment once folds have split it into more than `segments_max`;
        another process rebuilding it at the same time wins, and that is no failure."""
        index = _vector_index(chunks)
        if index is None or (index.num_segments or 1) <= segments_max or stopping.requested():
            return
        log.info("rebuilding the vector index: %d segments", index.num_segments)
        try:
            chunks.create_index("vector", config=VECTOR_INDEX, replace=True)
        except Exception as exc:
            if not is_commit_conflict(exc):
                raise
            self.conflicts_retried += 1
            log.info("another process rebuilt the vector index first")

    @_guarded
    def has_vector_index(self) -> bool:
        chunks = self.chunks()
        return chunks is not None and _vector_index(chunks) is not None

    @_guarded
    def unindexed_rows(self) -> int:
        chunks = self.chunks()
        if chunks is None:
            return 0
        for index in chunks.list_indices():
            if index.index_type == "FTS":
                stats = chunks.index_stats(index.name)
                return int(stats.num_unindexed_rows) if stats else 0
        return chunks.count_rows()

    # ---- reading -------------------------------------------------------
    # Both sides rank the whole index and let a filter hide rows (query.filters): the
    # replica masks its exact similarities, LanceDB prefilters, and the scale each side
    # is fused by comes from the unfiltered candidates (query.hybrid.Side).
    @_guarded
    def vector_side(self, vector: Sequence[float] | np.ndarray, limit: int, where: Filter | None,
                    columns: list[str]) -> Side:
        """The `limit` chunks nearest `vector` inside `where`, nearest first (ties by id), with `_distance`."""
        chunks = self.chunks()
        if chunks is None:
            return Side([], 0.0, 0.0)
        replica = self._current_replica(chunks, columns)
        if replica is not None:
            sims = replica.similarities(vector)
            whole = replica.best(sims, limit)
            found = whole if where is None else replica.best(sims, limit, replica.mask(where))
            top = sims[whole] if len(whole) else np.zeros(1)
            return Side(replica.rows_at(found, columns, sims), float(top.max()), float(top.min()))
        index = _vector_index(chunks)  # asked once: the filtered and the unfiltered search share it
        segments = (index.num_segments or 1) if index is not None else 1
        return _masked(lambda w, cols: _nearest(chunks, vector, limit, w, cols, segments), limit, where, columns,
                       "_distance")

    def vector_search(self, vector: Sequence[float] | np.ndarray, limit: int, where: Filter | None,
                      columns: list[str]) -> list[dict[str, Any]]:
        return list(self.vector_side(vector, limit, where, columns).rows)

    @_guarded
    def similarities(self, vector: Sequence[float] | np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Cosine similarity of the chunks `ids` to `vector` (chunks that are gone are left out)."""
        chunks = self.chunks()
        if chunks is None or not ids:
            return {}
        replica = self._current_replica(chunks, ["id"])
        query = unit(vector)
        if replica is not None:
            return {i: float(replica.matrix[replica.by_id[i]] @ query) for i in ids if i in replica.by_id}
        rows = self.chunk_rows(in_list("id", ids), ["id", "vector"])
        return {r["id"]: float(unit(r["vector"]) @ query) for r in rows}

    def section_chunks(self, parent_ids: Sequence[str]) -> list[StoredChunk]:
        """Every chunk of the given sections, in document order."""
        return [StoredChunk.of(row) for row in self.section_rows(parent_ids, STORED_CHUNK_COLUMNS)]

    @_guarded
    def section_rows(self, parent_ids: Sequence[str], columns: list[str]) -> list[dict[str, Any]]:
        """Every chunk of the given sections, ordered like chunk_rows."""
        chunks = self.chunks()
        if chunks is None or not parent_ids:
            return []
        replica = self._current_replica(chunks, columns)
        if replica is None:
            return self.chunk_rows(in_list("parent_id", parent_ids), columns)
        return _in_document_order(replica.in_sections(parent_ids, columns))

    def query_path(self, rows: int) -> str:
        """How an index of `rows` chunks is ranked: "memory" (the exact in-memory replica, when it fits
        replica.BUDGET_BYTES) or "index" (LanceDB's indexes). Chosen again at every query, so an index
        that grows past the budget switches without a restart."""
        return "memory" if replica_module.fits(rows, self.dim) else "index"

    def _current_replica(self, chunks, columns: list[str]) -> Replica | None:  # type: ignore[no-untyped-def]
        """The in-memory replica of the table's current version (refreshed after a commit), or of the version
        this thread's query_view holds; None when too large."""
        view = getattr(self._pinned, "view", None)
        replica = view[1] if view is not None and view[0] is chunks else self._replica_at(chunks, chunks.version)
        return replica if replica is not None and replica.serves(columns) else None

    def _replica_at(self, chunks, version: int) -> Replica | None:  # type: ignore[no-untyped-def]
        replica = self._replica
        if replica is None or replica.version != version:
            with self._replica_lock:
                replica = self._replica
                if replica is None or replica.version != version:
                    self._replica = replica = self._read_replica(chunks, version, replica)
        return replica

    def _read_replica(self, chunks, version: int, old: Replica | None) -> Replica | None:  # type: ignore[no-untyped-def]
        """Refresh `old` to `version` reading only the rows it does not hold, or read the table whole.

        Read after the version: the data is at least that new, so a later commit only costs
        another refresh. The whole table is read the first time, after a schema change, and
        when a commit lands between the key scan and the read of the missing rows.
        """
        if not replica_module.fits(chunks.count_rows(), self.dim):
            return None
        names = [n for n in chunks.schema.names if n not in ("keywords", "metadata", "embed_key")]
        if old is not None and old.rows.column_names == [n for n in names if n != "vector"]:
            keys = chunks.search().select(KEY_COLUMNS).with_row_id(True).limit(None).to_arrow()
            try:
                fresh, read = old.refreshed(
                    version, keys, lambda ids: chunks.take_row_ids(ids).select(names).with_row_id().to_arrow())
                self.replica_rows_read += read
                return fresh
            except LookupError:
                log.info("rows changed while the replica refreshed; reading the table whole")
        table = chunks.search().select(names).with_row_id(True).limit(None).to_arrow()
        self.replica_rows_read += table.num_rows
        return Replica.from_arrow(version, table)

    @_guarded
    def keyword_side(self, terms: str | Mapping[str, float], limit: int, where: Filter | None,
                     columns: list[str]) -> Side:
        """The `limit` best BM25 matches of `terms` inside `where`, best first (ties by id), with `_score`.
        `terms` is a space-separated OR query, or weighted terms (term -> boost).

        BM25's statistics (document frequencies, average length) are the whole index's,
        whatever the filter: LanceDB's prefilter only hides rows, so a chunk's score is
        the same with or without a scope, and one ranking serves both.
        """
        chunks = self.chunks()
        if chunks is None or not terms:
            return Side([], 0.0, 0.0)
        replica = self._replica  # any version: it serves only the rows it holds as they are (_bm25)
        return _masked(lambda w, cols: _bm25(chunks, terms, limit, w, cols, replica), limit, where, columns,
                       "_score", speculate=not self._keeps_everything(where))

    def _keeps_everything(self, where: Filter | None) -> bool:
        """Whether `where` keeps every chunk of the replica last read (whatever its version: a guess that
        only decides whether a filtered side searches twice at once or one after the other)."""
        replica = self._replica
        return where is not None and replica is not None and bool(replica.mask(where).all())

    def keyword_search(self, terms: str, limit: int, where: Filter | None,
                       columns: list[str]) -> list[dict[str, Any]]:
        return list(self.keyword_side(terms, limit, where, columns).rows)

    @_guarded
    def chunk_rows(self, where: str, columns: list[str], limit: int | None = None) -> list[dict[str, Any]]:
        chunks = self.chunks()
        if chunks is None:
            return []
        query = chunks.search().where(where).select(columns)
        query = query.limit(limit) if limit else query.limit(None)
        return _in_document_order(query.to_list())

    @_guarded
    def vectors_by_key(self, keys: Sequence[str], model_id: str, scheme: str) -> dict[str, Any]:
        """{embed_key: vector} for the rows embedded by `model_id` under `scheme` that hold one of `keys` (read
        `_IN_BATCH` keys at a time, through the key's B-tree once it exists)."""
        chunks = self.chunks()
        found: dict[str, Any] = {}
        where = _embedded_by(model_id, scheme)
        if chunks is None:
            return found
        for start in range(0, len(keys), _IN_BATCH):
            table = (chunks.search().where(f"({in_list('embed_key', keys[start:start + _IN_BATCH])}) AND ({where})")
                     .select(["embed_key", "vector"]).limit(None).to_arrow())
            if table.num_rows:
                vectors = table.column("vector").combine_chunks()
                matrix = vectors.flatten().to_numpy(zero_copy_only=False).reshape(-1, vectors.type.list_size)
                found.update(zip(table.column("embed_key").to_pylist(), matrix, strict=False))
        return found

    def unkeyed_chunks(self, model_id: str, scheme: str, columns: list[str]) -> list[dict[str, Any]]:
        """Rows embedded by `model_id` under `scheme` before `embed_key` existed (it is null there)."""
        return self.chunk_rows(f"embed_key IS NULL AND ({_embedded_by(model_id, scheme)})", columns)

    def chunks_by_id(self, ids: Sequence[str], model_id: str, scheme: str, columns: list[str]) -> list[dict[str, Any]]:
        """The rows `ids` that are still embedded by `model_id` under `scheme` (read `_IN_BATCH` at a time)."""
        where = _embedded_by(model_id, scheme)
        return [row for start in range(0, len(ids), _IN_BATCH)
                for row in self.chunk_rows(f"({in_list('id', ids[start:start + _IN_BATCH])}) AND ({where})", columns)]

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
        """{source id: its chunks in document order} for `source_ids` (read `_IN_BATCH` at a time), or, with
        None, for every ingest_data and URL item (the documents a rebuild from disk cannot bring back)."""
        if source_ids is None:
            chunks = self._stored_chunks("source_kind != 'file'")
        else:
            chunks = [c for start in range(0, len(source_ids), _IN_BATCH)
                      for c in self._stored_chunks(in_list("source_id", source_ids[start:start + _IN_BATCH]))]
        by_source: dict[str, list[StoredChunk]] = {}
        for chunk in chunks:
            by_source.setdefault(chunk.source_id, []).append(chunk)
        return by_source

    @_guarded
    def source_rows(self, where: str | None = None) -> list[SourceRow]:
        table = self.sources()
        if table is None:
            return []
        query = table.search()
        if where:
            query = query.where(where)
        names = [f.name for f in SOURCE_SCHEMA]
        return [SourceRow(**{k: r[k] for k in names}) for r in query.limit(None).to_list()]

    @_guarded
    def count_chunks(self, where: str | None = None) -> int:
        chunks = self.chunks()
        return 0 if chunks is None else chunks.count_rows(where)

    def source(self, source_id: str) -> SourceRow | None:
        """One document's record, or None when the index does not know it."""
        rows = self.source_rows(f"source_id = {sql_str(source_id)}")
        return rows[0] if rows else None

    def sources_by_id(self, source_ids: Sequence[str]) -> dict[str, SourceRow]:
        """The records of those of `source_ids` the index knows, by id (read `_IN_BATCH` at a time)."""
        return {s.source_id: s for start in range(0, len(source_ids), _IN_BATCH)
                for s in self.source_rows(in_list("source_id", source_ids[start:start + _IN_BATCH]))}

    def file_sources(self) -> list[SourceRow]:
        """The records of every file (no ingest_data or URL item)."""
        return self.source_rows("source_kind = 'file'")

    def item_sources(self) -> list[SourceRow]:
        """The records of every ingest_data and URL item (no file)."""
        return self.source_rows("source_kind != 'file'")

    def count_chunks_of(self, source_id: str) -> int:
        """Chunks stored for one document."""
        return self.count_chunks(f"source_id = {sql_str(source_id)}")

    def count_chunks_not_cut_by(self, scheme: str) -> int:
        """Chunks cut by a chunking scheme other than `scheme` (an older one: a sync re-cuts them)."""
        return self.count_chunks(f"scheme != {sql_str(scheme)}")

    @_guarded
    def chunk_counts(self) -> dict[str, int]:
        """Rows in `chunks` per source id (what a sync compares with each source's chunk_count)."""
        chunks = self.chunks()
        if chunks is None:
            return {}
        ids = chunks.search().select(["source_id"]).limit(None).to_arrow().column("source_id")
        return {item["values"]: item["counts"] for item in ids.value_counts().to_pylist()}
