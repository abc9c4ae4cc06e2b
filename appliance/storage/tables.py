"""The LanceDB index's tables: what a row holds, how the tables open, and the errors a write reports.

Two tables live in DB_PATH. `chunks` holds one row per retrieval unit with its
vector (cosine distance on L2-normalised vectors, said explicitly on every
search) and a pre-analysed `keywords` column under a BM25 index. `sources`
holds one row per document (file, data item or URL), including documents that
failed or produced no chunks, so a sync can decide what to skip without
touching `chunks`. `identity.json` records what the index was built with.

Only the storage modules import lancedb: this one (the tables), writes (writes and
maintenance), sources (the source registry), reads (the query reader and the
LanceDB ranker) and swap; index composes them into the `Index` callers hold.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, Literal, NoReturn, ParamSpec, Protocol, TypeVar, overload

from appliance.platform.hidden_imports import pandas_hidden

with pandas_hidden():  # pyarrow.dataset probes for pandas on import; nothing here uses it
    import lancedb
    import pyarrow as pa
    from lancedb.table import Table

from appliance.chunks import STORED_CHUNK_COLUMNS, Chunk
from appliance.config import Bucket
from appliance.errors import (
    CONFLICT_ATTEMPTS,
    IndexCorrupt,
    is_commit_conflict,
    is_vanished_file,
    past_deadline,
    storage_error,
)
from appliance.languages import language
from appliance.platform import native_memory
from appliance.storage.filters import Filter

if TYPE_CHECKING:
    from appliance.storage.bucket import SharedObjects

CHUNKS = "chunks"
SOURCES = "sources"
IDENTITY_FILE = "identity.json"
FTS_COLUMN = "keywords"
IN_BATCH = 200
READ_CONSISTENCY_S = 1.0
"""A table handle re-reads the latest commit at most this long after another process made it,
so `status`, `list_files` and reads see other writers within that bound (queries check at once). On disk
LanceDB checks before an operation once this has passed; in a bucket the appliance does (Tables.refresh_for_read),
within the deadline: LanceDB's own check takes none, and against an endpoint that stopped answering it took
~14 S3_TIMEOUTs to fail (6-7 attempts of a LIST), on top of any deadline the operation had."""

METADATA_CACHE_BYTES = 16 << 20
"""LanceDB's cache of manifests and file footers, bounded: by default it keeps every version a process
has seen, and a sync commits two or three versions per write, each manifest listing every fragment so
far (scripts/bench_sync_rss.py probes: 113 MB over 20,000 files, ~5 KB a file; at this cap a fold took
as long as uncapped, 1.4 s at 10,000 rows). The indexes' own cache keeps LanceDB's default."""
DEADLINE_REQUESTS = 4
"""In a bucket, one read, merge or delete of the index may take this many S3_TIMEOUTs in all (two requests'
worth of retries). LanceDB bounds each request but retries each file's reads on its own, one file after
another: with the endpoint frozen, a read of a six-fragment table took 300 s to fail, longer with more."""
native_memory.bound_malloc()  # before LanceDB starts its threads: see native_memory
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
        pa.field("lang", pa.string()),               # stored_language of the text; null: written before it
        pa.field(CARD, pa.string()),                 # card_of the row: its CARD_FIELDS in one cell
    ])


def chunk_write_schema(dim: int, fields: frozenset[str]) -> pa.Schema:
    """What the writer writes to a chunks table holding `fields`: chunk_schema, and the earlier layout's card
    where the table has it (OLD_CARD)."""
    schema = chunk_schema(dim)
    return schema.append(pa.field(OLD_CARD, pa.string())) if OLD_CARD in fields else schema


CARD = "card2"
CARD_FIELDS = (*STORED_CHUNK_COLUMNS, "lang")
"""What a chunk's card holds, in this order: the columns a StoredChunk is read from, its id among them, and its
stored language. LanceDB reads a row a column at a time, and cells of rows far apart cost about the same whatever
their size (at 1M chunks 36 rows of one column ~2 ms, of StoredChunk's 21 columns ~21 ms): from the card, the hits'
sections are read as one column, and a ranked list's passages, ids and languages with its ranking (a BM25 list of
160 rows at 1M chunks: 19 ms of CPU, against 30 with the id and the language read beside the card; docs/
BENCHMARKS.md, Growth). A version that changes these fields names the column anew, so a card is never read by
another layout than the one that wrote it."""
OLD_CARD = "card"
OLD_CARD_FIELDS = tuple(name for name in STORED_CHUNK_COLUMNS if name != "id")
"""The card's earlier layout (without the id, read beside it, and the language). A table an earlier version wrote
keeps that column, and this version's writer fills it too, so an earlier version reading beside it (a second
container not yet upgraded) reads what the row holds; a new table has none."""


def card_of(row: Mapping[str, Any], fields: tuple[str, ...] = CARD_FIELDS) -> str:
    """What a card holds for a chunk row: its `fields`' values, a JSON array."""
    return json.dumps([row.get(name) for name in fields], ensure_ascii=False, separators=(",", ":"))


def stored_language(text: str | None) -> str:
    """What `lang` holds for a chunk: the language languages.language reads in its text, "" where none is
    clear. The writer stores it (IndexWriter.replace_sources), so a translated keyword list is searched among
    the passages in other languages alone, without reading their texts (reads.other_languages)."""
    return language(text or "") or ""


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
FIELD_DERIVED: dict[str, tuple[tuple[str, ...], Callable[..., Any]]] = {
    "lang": (("text",), stored_language),
    CARD: (CARD_FIELDS, lambda *values: card_of(dict(zip(CARD_FIELDS, values, strict=True)))),
    OLD_CARD: (OLD_CARD_FIELDS, lambda *values: card_of(dict(zip(OLD_CARD_FIELDS, values, strict=True)),
                                                        OLD_CARD_FIELDS)),
}
"""Fields derived from a row's other columns (field -> (columns, derivation of their values)), in the order they
are derived (a card holds the language): the writer derives them for every row it writes (derive_fields), and a
newer version's on the rows written before the field existed (_evolve). The earlier card is only ever written
where a table already has it (chunk_write_schema)."""


def derive_fields(row: dict[str, Any], names: Iterable[str]) -> None:
    """Give `row` the FIELD_DERIVED fields among `names`, from its other columns."""
    wanted = set(names)
    for name, (sources, value) in FIELD_DERIVED.items():
        if name in wanted:
            row[name] = value(*(row.get(source) for source in sources))


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
    default where one is defined, so an upgrade never re-embeds anything. Processes
    that open the table at once (the scheduler and the server, after an upgrade) each
    try; the ones whose commit loses the race find the fields the winner added. An
    index this process cannot write (a read-only mount, a bucket's read-only credentials)
    is opened as it is: queries read what it holds (reads.IndexReader.keyword_side without
    `lang`), and a sync says why it cannot write.
    """
    for attempt in range(CONFLICT_ATTEMPTS):
        missing = [f for f in schema if f.name not in set(table.schema.names)]
        if not missing:
            return
        try:
            _add_fields(table, missing)
            return
        except Exception as exc:
            if is_commit_conflict(exc) and attempt < CONFLICT_ATTEMPTS - 1:
                table.checkout_latest()  # another process added them, or some of them
                continue
            named = storage_error(exc, f"the {table.name} table")
            if named is None:
                raise
            # read-only, a bucket with read-only credentials, a full disk: it reads as it is (every field a query
            # needs is optional), and the next open that may write adds them
            log.warning("The %s table cannot be written, so the fields a newer version adds (%s) are left out "
                        "until a process that may write opens it: %s", table.name,
                        ", ".join(f.name for f in missing), named)
            return


def _add_fields(table: Table, missing: list[pa.Field]) -> None:
    """The plain fields first, with their defaults, then the derived ones (a card holds some of the plain)."""
    plain = [f for f in missing if f.name not in FIELD_DERIVED]
    if plain:
        table.add_columns(plain)
    for f in plain:
        if f.name in FIELD_DEFAULTS:
            table.update(where=f"{f.name} IS NULL", values_sql={f.name: FIELD_DEFAULTS[f.name]})
    for f in missing:
        if f.name in FIELD_DERIVED:
            _derive(table, f, *FIELD_DERIVED[f.name])


def _derive(table: Table, target: pa.Field, sources: tuple[str, ...], value: Callable[..., Any]) -> None:
    """Give a table written before `target` existed the column, each row's `value` of its `sources`: one read of
    those columns, at the first open after an upgrade."""
    import lance  # pylance, as a fold uses it (writes.fold); only an upgrade gets here

    def derived(batch: pa.RecordBatch) -> pa.RecordBatch:
        values = [value(*row) for row in zip(*(batch.column(name).to_pylist() for name in sources), strict=True)]
        return pa.record_batch([pa.array(values, target.type)], names=[target.name])

    table.to_lance().add_columns(lance.batch_udf(output_schema=pa.schema([target]))(derived),
                                 read_columns=list(sources))
    table.checkout_latest()


def _open_error(exc: Exception, table: str, tables: Tables) -> Exception:
    return storage_error(exc, f"the {table} table in {tables.location}", tables.db_path) or IndexCorrupt(
        f"Cannot open the {table} table in {tables.location}: {exc}")


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


def in_document_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows.sort(key=lambda r: (r.get("source_id", ""), r.get("chunk_index", 0)))
    return rows


VECTOR_INDEX_TYPE = "IvfRq"
VECTOR_CODE_BITS = 4
VECTOR_PARTITION_ROWS = 1000
"""The vector index: IVF over RaBitQ codes of four bits a dimension (192 bytes a 384-dimension vector), in
partitions of ~1,000 rows (writes.VECTOR_INDEX); a search scans the codes of a share of the partitions
(reads.PROBED_SHARE) and gives the exact distance of what it returns. At 1M chunks in an index grown by folds it
found 0.976 of the true 10 nearest asked for 10 (0.996 asked for 40), where two bits found 0.728 (0.921); one bit
needed 1,200 candidates re-ranked on the stored vectors (0.97 in ~30 ms, against ~22 ms). It takes ~170 MB more
of a serving process's memory than one bit (218 MB on disk against 68; docs/BENCHMARKS.md, Growth). An index of
other codes, an earlier version's, is built anew at the next refresh."""


def code_bits(index: Any) -> int | None:
    """The bits a dimension of a RaBitQ vector index's codes (LanceDB's IndexConfig); None for another kind."""
    compression = (getattr(index, "index_details", None) or {}).get("compression") or {}
    return compression.get("num_bits") if compression.get("type") == "rq" else None


def vector_index(chunks: Table, indices: Iterable[Any] | None = None) -> Any:
    """The chunks table's vector index (LanceDB's IndexConfig), or None; from `indices` when its indexes were
    listed already."""
    listed = chunks.list_indices() if indices is None else indices
    return next((i for i in listed if tuple(i.columns) == ("vector",)), None)


class OnTables(Protocol):
    """A part of the index (writer, registry, reader): it works on one `Tables`."""

    @property
    def tables(self) -> Tables: ...


_S = TypeVar("_S", bound=OnTables)
_P = ParamSpec("_P")
_R = TypeVar("_R")
PartMethod = Callable[Concatenate[_S, _P], _R]
"""A method of a part of the index, as the decorators below take and return it."""


def guarded(method: PartMethod[_S, _P, _R]) -> PartMethod[_S, _P, _R]:
    """Report a failed read or write of the index as its named error (disk full, read-only, damaged).

    A read of a version whose files another process's fold has just removed (writes.KEEP_REPLACED_FILES: a
    version this process checked out before that process committed) is read again at the latest version,
    once; a file missing from the latest version too is damage."""
    @functools.wraps(method)
    def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            self.tables.refresh_in_bucket()
            return method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - raised again, as its named error or as it is
            if not is_vanished_file(exc):
                raise_named(self.tables, exc)
            self.tables.files_vanished += 1
            log.info("%s read files a newer version had replaced; reading the latest", method.__name__)
        try:
            self.tables.refresh_handles()
            return method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - as above
            raise_named(self.tables, exc)
    return wrapper


def raise_named(tables: Tables, exc: Exception) -> NoReturn:
    """Raise `exc` as its named storage error (disk full, read-only, busy, damaged, a bucket out of
    reach), or as it is."""
    named = storage_error(exc, f"the index at {tables.location}", tables.db_path)
    if named is None or named is exc:
        raise exc
    raise named from exc


def backoff(attempt: int) -> None:
    """Wait before repeating a write that lost a commit race: doubling, jittered, at most ~3 s."""
    time.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random()))


def writes(method: PartMethod[_S, _P, _R]) -> PartMethod[_S, _P, _R]:
    """A write that retries when another process committed first (LanceDB's retryable
    commit conflict), with jittered backoff, then reports a failure by its name.

    Every write method is idempotent as a whole (deletes by id, then adds, then upserts),
    so repeating it after a lost race is safe; other processes writing is normal: the
    scheduler, the MCP server and a CLI share one index.
    """
    @functools.wraps(method)
    def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        tables = self.tables
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                tables.refresh_in_bucket()
                return method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - retried when a lost commit race, else raised again
                if not (is_commit_conflict(exc) or is_vanished_file(exc)) or attempt == CONFLICT_ATTEMPTS:
                    raise_named(tables, exc)
                if is_vanished_file(exc):  # it worked on a version whose files another process's fold removed
                    tables.files_vanished += 1
                else:
                    tables.conflicts_retried += 1
                log.info("%s lost a race to another process (attempt %d); retrying", method.__name__, attempt)
                backoff(attempt)
                with contextlib.suppress(Exception):  # the next attempt reports whatever is wrong
                    tables.refresh_handles()
        raise AssertionError("unreachable")
    return wrapper


class _Step(threading.Thread):
    """A call on a thread of its own, so that its caller can stop waiting for it; its error is kept for the caller."""

    def __init__(self, call: Callable[[], None]) -> None:
        super().__init__(name="index-refresh", daemon=True)
        self._call = call
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._call()
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits
            self.error = exc


class Tables:
    """The open tables of one DB_PATH, its identity, and what its parts share. Safe to share between threads."""

    def __init__(self, db_path: Path, dim: int, *, memory_budget: int, bucket: Bucket | None = None) -> None:
        self.db_path = db_path
        """The tables' directory; for an index in `bucket`, this host's state directory."""
        self.bucket = bucket
        self.location = bucket.uri if bucket else str(db_path)
        """Where the tables are, as errors name it."""
        self.dim = dim
        self.memory_budget = memory_budget
        """Bytes this process may hold of the index in memory (Settings.replica_budget_bytes): an index
        that fits is ranked by the exact in-memory replica, a larger one through LanceDB's indexes."""
        self.deadline = timedelta(seconds=bucket.timeout_s * DEADLINE_REQUESTS) if bucket else None
        """What a query, merge or delete of the tables may take (DEADLINE_REQUESTS); None: no bound (a disk)."""
        self.lock = threading.RLock()
        """Held by a write of this process: readers never wait for it."""
        self.files_vanished = 0
        """Reads and writes repeated at the latest version because another process's fold removed the files
        of the version they worked on (for tests)."""
        self._db: lancedb.DBConnection | None = None
        self._chunks: Table | None = None
        self._sources: Table | None = None
        self.conflicts_retried = 0
        """Writes of this process that lost a commit race and were repeated."""
        self._identity_read: tuple[float, Identity | None] | None = None
        self._refreshed_at = 0.0
        self._refreshing: _Step | None = None
        """A bucket's refresh still running (past its deadline, perhaps): the next refresh waits for it."""
        self._refresh_guard = threading.Lock()
        self.chunk_fields: frozenset[str] = frozenset()
        """The fields of the chunks table as opened: all of chunk_schema's, unless this version's could not be
        added (a read-only index an earlier version wrote: _evolve)."""

    @property
    def tables(self) -> Tables:
        """Itself: the tables' own reads and writes (identity, handles) report errors as the parts' do."""
        return self

    def connect(self) -> lancedb.DBConnection:
        if self._db is None:
            self.db_path.mkdir(parents=True, exist_ok=True)
            self._db = lancedb.connect(self.location,
                                       storage_options=self.bucket.storage_options() if self.bucket else None,
                                       read_consistency_interval=None if self.bucket
                                       else timedelta(seconds=READ_CONSISTENCY_S),
                                       session=lancedb.Session(metadata_cache_size_bytes=METADATA_CACHE_BYTES))
        return self._db

    def has_table(self, name: str) -> bool:
        """Whether the table was ever created: its directory, or (in a bucket) LanceDB's own list."""
        if self.bucket is None:
            return (self.db_path / f"{name}.lance").exists()
        try:
            return name in self.connect().list_tables().tables
        except Exception as exc:  # noqa: BLE001 - raised again as its named error (bucket gone, credentials)
            raise_named(self, exc)

    def exists(self) -> bool:
        return self.has_table(CHUNKS)

    @overload
    def chunks(self, create: Literal[True]) -> Table: ...
    @overload
    def chunks(self, create: bool = False) -> Table | None: ...
    def chunks(self, create: bool = False) -> Table | None:
        if self._chunks is not None:  # open already: readers never wait for a writer's lock
            return self._chunks
        with self.lock:
            if self._chunks is None:
                if not create and not self.exists():
                    return None
                db = self.connect()
                try:
                    self._chunks = _open_or_create(db, CHUNKS, chunk_schema(self.dim))
                except Exception as exc:  # lancedb raises plain errors for damaged datasets
                    raise _open_error(exc, CHUNKS, self) from exc
                self.chunk_fields = frozenset(self._chunks.schema.names)
            return self._chunks

    @property
    def languages_stored(self) -> bool:
        """Whether the chunks table holds each chunk's language (`lang`, reads.other_languages)."""
        return "lang" in self.chunk_fields

    @property
    def cards_stored(self) -> bool:
        """Whether the chunks table holds each chunk's card (CARD), which reads.carded reads for its columns."""
        return CARD in self.chunk_fields

    def evolve_chunks(self) -> None:
        """Give the chunks table this version's fields where its open could not (_evolve: it was not writable
        then); a writer asks before it writes, and fails by name if the table still cannot be written."""
        chunks = self.chunks(create=True)
        schema = chunk_schema(self.dim)
        if not self.chunk_fields.issuperset(schema.names):
            with self.lock:
                _evolve(chunks, schema)
                self.chunk_fields = frozenset(chunks.schema.names)

    @overload
    def sources(self, create: Literal[True]) -> Table: ...
    @overload
    def sources(self, create: bool = False) -> Table | None: ...
    def sources(self, create: bool = False) -> Table | None:
        if self._sources is not None:
            return self._sources
        with self.lock:
            if self._sources is None:
                if not create and not self.has_table(SOURCES):
                    return None
                try:
                    self._sources = _open_or_create(self.connect(), SOURCES, SOURCE_SCHEMA)
                except Exception as exc:
                    raise _open_error(exc, SOURCES, self) from exc
            return self._sources

    def count_rows(self, table: Table, where: str | None = None) -> int:
        """The rows of `table` that `where` keeps (all: the manifest's count): in a bucket, a filtered count is a
        query bound by the deadline (LanceDB's count takes no deadline)."""
        if self.deadline is None or where is None:
            return table.count_rows(where)
        return int(table.search().where(where).select([]).with_row_id(True).limit(None).to_arrow(
            timeout=self.deadline).num_rows)

    def delete_rows(self, table: Table, where: str, key: str) -> None:
        """Delete the rows of `table` that `where` keeps: in a bucket, by a merge on the table's `key` column that
        deletes them, bound by the deadline (LanceDB's delete takes none; the merge reads the whole table, which
        a delete through the key's index does not, so a disk keeps the delete)."""
        if self.deadline is None:
            table.delete(where)
            return
        (table.merge_insert(key).when_not_matched_by_source_delete(where)
         .execute(table.schema.empty_table(), timeout=self.deadline))

    def forget(self) -> None:
        """Drop the open handles (after the tables were replaced): the next use opens them again."""
        self._chunks = self._sources = None

    def renew_session(self) -> None:
        """Drop the open handles and the LanceDB session they read through: the next use opens them in a new one.
        A session keeps every index it has read in its cache (up to LanceDB's 6 GiB) after a fold replaced it:
        at 1M chunks a server's RSS rose from 1,285 to 1,692 MB once a sync's end had rewritten the indexes
        (IndexReader._indexes_replaced says when). A query still running on the old handles finishes on them."""
        with self.lock:
            self._db = None
            self.forget()

    def checkout_latest(self) -> None:
        """See commits made by other processes (a sync running beside the server) now."""
        try:
            self.refresh_handles()
        except Exception as exc:  # noqa: BLE001 - raised again as its named error
            raise_named(self, exc)

    def refresh_handles(self) -> None:
        """The open tables at their latest commits; in a bucket within the deadline (a StorageUnreachable
        past it), since LanceDB's own look for new versions takes none."""
        def refresh() -> None:
            for table in (self._chunks, self._sources):
                if table is not None:
                    table.checkout_latest()
        if self.deadline is None:
            refresh()
            return
        with self._refresh_guard:
            step = self._refreshing
            if step is None or not step.is_alive():  # else one past its deadline still runs: wait for it instead
                step = self._refreshing = _Step(refresh)
                step.start()
        step.join(self.deadline.total_seconds())
        if step.is_alive():
            raise past_deadline(f"the index at {self.location}")
        if step.error is not None:
            raise step.error
        self._refreshed_at = time.monotonic()

    def refresh_for_read(self) -> None:
        """Before a query: the latest commit. In a bucket every refresh lists each table's versions (a request
        apiece), so there a query refreshes at most once per READ_CONSISTENCY_S and sees a commit within it."""
        if self.bucket is not None and time.monotonic() - self._refreshed_at < READ_CONSISTENCY_S:
            return
        self.refresh_handles()

    def refresh_in_bucket(self) -> None:
        """Before any read or write of an index in a bucket, what LanceDB's consistency check does on disk (the
        tables open without it there: see READ_CONSISTENCY_S)."""
        if self.bucket is not None:
            self.refresh_for_read()

    # ---- identity ------------------------------------------------------
    @property
    def identity_location(self) -> str:
        return f"{self.location}/{IDENTITY_FILE}"

    @guarded
    def read_identity(self) -> Identity | None:
        path = self.db_path / IDENTITY_FILE
        try:
            if self.bucket is not None:
                return self._bucket_identity()
            data = json.loads(path.read_text("utf-8"))
            return Identity(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise IndexCorrupt(f"{self.identity_location} is unreadable: {exc}") from exc

    @guarded
    def write_identity(self, identity: Identity) -> None:
        if self.bucket is not None:
            self._shared().write(IDENTITY_FILE, asdict(identity))
            self._identity_read = None
            return
        self.db_path.mkdir(parents=True, exist_ok=True)
        tmp = self.db_path / f".{IDENTITY_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(identity), indent=2), "utf-8")
        os.replace(tmp, self.db_path / IDENTITY_FILE)

    def _bucket_identity(self) -> Identity | None:
        """identity.json from the bucket, read at most once per READ_CONSISTENCY_S (every query checks it,
        and each read is a request; it changes only when a sync rebuilds the index)."""
        read = self._identity_read
        if read is None or time.monotonic() - read[0] > READ_CONSISTENCY_S:
            found = self._shared().read(IDENTITY_FILE)
            read = self._identity_read = (time.monotonic(), None if found is None else Identity(**found[0]))
        return read[1]

    def remove_identity(self) -> None:
        self._identity_read = None
        if self.bucket is not None:
            self._shared().delete(IDENTITY_FILE)
        else:
            (self.db_path / IDENTITY_FILE).unlink(missing_ok=True)

    def _shared(self) -> SharedObjects:
        """identity.json beside the tables in the bucket (obstore, imported for a bucket only)."""
        from appliance.storage.bucket import SharedObjects

        assert self.bucket is not None
        return SharedObjects(self.bucket)
