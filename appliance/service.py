"""The one service layer: every operation the CLI and the MCP server offer.

Adapters build `Settings` once, construct `Appliance(settings)`, call a method
and render its result; they never rank, resolve paths or validate themselves.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance import __version__
from appliance.config import TOP_K_CAP, Settings
from appliance.embed import Embedder, load_spec
from appliance.errors import (
    ApplianceError,
    ConfigError,
    IndexCorrupt,
    IndexMismatch,
    InvalidArgument,
    NotFound,
    RootsChanged,
    UnsupportedFile,
    UrlIngestDisabled,
    storage_error,
)
from appliance.ingest import convert
from appliance.ingest.chunk import SCHEME_VERSION, chunk_document, reconstruct
from appliance.ingest.discover import (
    FoundFile,
    Skipped,
    contained_root,
    ignore_problems,
    printable,
    resolve_in_roots,
    walk,
)
from appliance.ingest.isolate import ConvertPool
from appliance.ingest.ocr import OcrConfig, ocr_status
from appliance.ingest.snapshots import Kept, Member, dedupe_sequence, snapshot_members
from appliance.keywords import keywords_field, language, query_terms
from appliance.locking import lock_holder, sync_lock
from appliance.paging import MAX_PAGE_CHARS, READ_PAGE_CHARS, text_page
from appliance.pipeline import EmbedWritePipeline, Work
from appliance.query.assemble import (
    HIT_COLUMNS,
    RANK_COLUMNS,
    SearchResult,
    assemble,
    hit_dict,
    row_to_chunk,
    within_budget,
)
from appliance.query.distinct import collapse
from appliance.query.filters import Filter
from appliance.query.hybrid import Side, cap_distance, cap_files, fuse, group_cut
from appliance.records import Converted
from appliance.reuse import IndexLookup, ReusingEmbed, embed_key
from appliance.state import SyncProgress, read_last_sync, read_scheduler_state, running_sync, save_last_sync
from appliance.store import IDENTITY_FILE, Identity, Index, SourceRow, chunk_row

if TYPE_CHECKING:
    from appliance.grep import GrepDoc, GrepResult
    from appliance.jobs import SyncJobs

Progress = Callable[[str, int, int, str], None]
"""progress(phase, done, total, current_path)"""

EMBED_BATCH_CHUNKS = 128
EMBED_AHEAD_CHUNKS = 4096
"""Chunks cut and waiting for the model (a few MB of rows): enough to keep it busy for
minutes while the conversion worker is stuck in a slow PDF."""
CONVERT_AHEAD = 64
CONVERT_AHEAD_BYTES = 32 * 1024 * 1024
"""Files (and their bytes on disk) converted ahead of the embedder, so conversion overlaps
embedding. With 16 files the embedder sat idle behind every slow PDF: 69% busy over
the corpus; the byte bound keeps the converted text waiting in memory small."""
WORKER_RECYCLE_FILES = 2000
"""A fresh worker costs ~3 s of imports; recycling every 200 files spent a third of a
small-file sync restarting workers. Memory stays bounded by the worker's rlimit."""
MAX_QUERY_CHARS = 4000
MAX_SOURCE_ID_CHARS = 1024
DEFAULT_BUDGET = 256
RESERVED_TOKENS = 16
GREP_BATCH_CHUNKS = 2000
"""Chunks grep reads from the index in one go (a few MB of text), so memory stays bounded."""
"""Room in the model window beyond the budget: special tokens and the passage prefix."""


@dataclass
class RunReport:
    """What an ingest or sync did; counts add up to what it saw."""

    seen: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    refreshed: int = 0
    deleted: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    seconds: float = 0.0
    started_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "added": self.added, "updated": self.updated,
                "unchanged": self.unchanged, "refreshed": self.refreshed, "deleted": self.deleted,
                "skippedCount": len(self.skipped), "failedCount": len(self.failed),
                "skipped": self.skipped, "failed": self.failed, "chunks": self.chunks,
                "chunksEmbedded": self.embedded, "chunksReused": self.reused,
                "seconds": round(self.seconds, 3), "startedAt": self.started_at}


def content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_key(source_id: str) -> str:
    return hashlib.sha1(source_id.encode("utf-8", "surrogateescape")).hexdigest()[:16]


_KEYWORD_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bm25")
"""Runs each query's BM25 side beside its vector side; one pool per process (a thread per query cost ~1 ms)."""


class Appliance:
    """Index, search and read documents under the configured roots."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.spec = embedder.spec if embedder is not None else load_spec(settings.model_name, settings.models_dir,
                                                                          settings.models_manifest)
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self.index = Index(settings.db_path, self.spec.dim)

    # ---- shared pieces -------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        """Loaded on first use, once, so the server starts without the model."""
        if self._embedder is None:
            with self._embedder_lock:
                if self._embedder is None:
                    self._embedder = Embedder(self.spec, self.settings.models_dir,
                                              threads=self.settings.embed_threads)
        return self._embedder

    @property
    def budget(self) -> int:
        budget = self.settings.chunk_token_budget or DEFAULT_BUDGET
        window = self.spec.max_seq_length - RESERVED_TOKENS
        if not 16 <= budget <= window:
            raise ConfigError(f"CHUNK_TOKEN_BUDGET must be between 16 and {window} for {self.spec.id}, not {budget}")
        return budget

    def identity(self) -> Identity:
        return Identity(model_id=self.spec.id, dim=self.spec.dim, scheme=SCHEME_VERSION, budget=self.budget)

    def identity_problem(self) -> str | None:
        """Why the index cannot be used with the current model/budget, or None."""
        stored = self.index.read_identity()
        if stored is None:
            return None
        current = self.identity()
        if (stored.model_id, stored.dim) != (current.model_id, current.dim):
            return (f"The index at {self.settings.db_path} was built with {stored.model_id} ({stored.dim} dims), "
                    f"not the configured {current.model_id} ({current.dim} dims)")
        if stored.budget != current.budget:
            return (f"The index at {self.settings.db_path} was cut with a {stored.budget}-token budget, "
                    f"not the configured {current.budget}")
        return None

    def _require_identity(self) -> None:
        problem = self.identity_problem()
        if problem:
            raise IndexMismatch(problem)

    def ocr_config(self) -> OcrConfig:
        return OcrConfig(languages=self.settings.ocr_languages,
                                 min_chars_per_page=self.settings.ocr_min_chars_per_page)

    def extensions(self) -> frozenset[str]:
        name, _hint = ocr_status(self.ocr_config())
        images = convert.IMAGE_EXTENSIONS if name != "unavailable" else frozenset()
        return convert.SUPPORTED_EXTENSIONS | images

    def resolve(self, path: str | Path, *, require_absolute: bool = False,
                must_exist: bool = True) -> tuple[Path, Path]:
        return resolve_in_roots(path, self.settings.roots, require_absolute=require_absolute, must_exist=must_exist)

    def _pool(self) -> ConvertPool:
        return ConvertPool(workers=self.settings.convert_workers, timeout_s=self.settings.convert_timeout_s,
                           memory_bytes=self.settings.convert_memory_mb * 1024 * 1024,
                           ocr=self.ocr_config(), max_file_size=self.settings.max_file_size,
                           max_tasks_per_worker=WORKER_RECYCLE_FILES)

    # ---- writing -------------------------------------------------------------
    def ingest(self, paths: Sequence[str | Path], *, require_absolute: bool = False,
               progress: Progress | None = None) -> RunReport:
        """Index the named files and everything under the named directories, replacing old content."""
        report = RunReport()
        files: list[FoundFile] = []
        for raw in paths:
            target, root = self.resolve(raw, require_absolute=require_absolute)
            if target.is_dir():
                for item in walk(self.settings.roots, self.extensions(), under=target):
                    self._collect(item, files, report)
            else:
                if target.suffix.lower() not in self.extensions():
                    raise UnsupportedFile(f"Cannot index {target}: "
                                          f"the extension {target.suffix or '(none)'} is not supported",
                                          hint="Supported: " + " ".join(sorted(self.extensions())))
                st = target.stat()
                files.append(FoundFile(target, root, st.st_size, st.st_mtime_ns))
        report.seen = len(files) + len(report.skipped)
        self._check_writable_identity()
        known = self.index.sources_by_id([str(f.path) for f in files])
        on_file = (lambda done, total, path: progress("indexing", done, total, path)) if progress else None
        self._index_files(files, report, on_file, self._embedding(report), known=known, force=True)
        return self._finish(report)

    def sync(self, path: str | Path | None = None, *, full: bool = False, clean: bool = False,
             discard_unrecoverable: bool = False, forget_roots: bool = False,
             progress: Progress | None = None, origin: str = "cli") -> RunReport:
        """Make the index equal to the files on disk (under `path`, when given).

        `clean` rebuilds everything: files, and ingest_data/URL items re-embedded from
        their stored text. A readable index is rebuilt in place, so readers in other
        processes keep answering from the old rows until each document's new ones
        replace them; a damaged one gets empty tables first (as new versions, so a
        reader holding the old version is not pulled from under its feet).

        While it runs, its progress is published beside the lock for every process
        (`status`, `sync_status`; see state.SyncProgress); `origin` says who started it.
        """
        if clean and path is not None:
            raise InvalidArgument("--clean rebuilds the whole index; run it without a path")
        with sync_lock(self.settings.db_path):
            publisher = SyncProgress(self.settings.db_path, origin, forward=progress)
            try:
                return self._sync_locked(path, full=full, clean=clean, discard_unrecoverable=discard_unrecoverable,
                                         forget_roots=forget_roots, publisher=publisher)
            finally:
                publisher.close()

    def _sync_locked(self, path: str | Path | None, *, full: bool, clean: bool, discard_unrecoverable: bool,
                     forget_roots: bool, publisher: SyncProgress) -> RunReport:
        report = RunReport()
        under = None
        if path is not None:
            under, _root = self.resolve(path)
        kept: list[tuple[SourceRow, Converted]] = []
        if clean:
            kept = self._items_to_keep(discard_unrecoverable)
            if not self._rebuildable_in_place():
                self.index.drop_all()
            full = True
        elif not full:
            self._check_writable_identity()
        files: list[FoundFile] = []
        for item in walk(self.settings.roots, self.extensions(), under=under):
            self._collect(item, files, report)
            publisher.scanning(len(files) + len(report.skipped))
        report.seen = len(files) + len(report.skipped)
        known = {s.source_id: s for s in self.index.file_sources()}
        if under is not None:
            known = {k: v for k, v in known.items() if Path(k) == under or Path(k).is_relative_to(under)}
        elif not clean:
            self._check_roots(known.values(), forget=forget_roots)
        # a skipped file keeps what was indexed for it, unless it is a link that leads nowhere now
        # or a file this process may no longer read (what its owner withdrew is not served either)
        on_disk = {str(f.path) for f in files} | {s["path"] for s in report.skipped
                                                  if s["code"] not in ("broken_link", "unreadable")}
        gone = [sid for sid in known if sid not in on_disk]
        damaged, stray = self._inconsistent(known, on_disk, under)
        if stray:
            self.index.delete_sources(stray)
        if full:
            self.index.write_identity(self.identity())
        embed = self._embedding(report, reuse=not clean)
        self._index_files(files, report, lambda done, total, p: publisher.indexing(done, total, p, report.chunks,
                                                                                 report.embedded, report.reused),
                          embed, known=known, force=full, gone=gone, redo=damaged)
        for start in range(0, len(kept), EMBED_BATCH_CHUNKS):
            self._write_batch(kept[start:start + EMBED_BATCH_CHUNKS], report, embed)
        if gone:  # after indexing: a moved file's vectors were still there to be reused
            self.index.delete_sources(gone)
            report.deleted = len(gone)
        publisher.finishing(report.chunks)
        report.seen += len(kept)
        report.updated += len(kept)
        self.index.refresh_indexes(wrote=bool(gone or stray or report.refreshed or self.index.unindexed_rows()))
        result = self._finish(report)
        self._save_last_sync(result, under)
        return result

    def _check_roots(self, known: Iterable[SourceRow], *, forget: bool) -> None:
        """Refuse a sync that would delete every file of a root this process was not given.

        Files are keyed by absolute path, so the same folder mounted at another path (the
        host's ~/docs and the container's /docs) would be deleted and embedded again.
        """
        held = self._foreign_roots(known)
        if not held or forget:
            return
        roots = ", ".join(f"{root} ({count} files)" for root, count in sorted(held.items()))
        configured = ", ".join(str(r) for r in self.settings.roots)
        raise RootsChanged(
            f"The index at {self.settings.db_path} holds documents under {roots}, which is not among the "
            f"configured roots ({configured}); a sync would delete them and embed them again under the new path",
            hint=("Give this process the documents at the path the index knows them by (BASE_DIRS, or the "
                  "container's -v HOST_FOLDER:/docs), use a separate DB_PATH per layout, or run "
                  "`minirag sync --forget-roots` to drop the entries of roots that are gone for good."))

    def _foreign_roots(self, rows: Iterable[SourceRow]) -> dict[str, int]:
        """Roots of indexed files that lie under none of the configured roots, with their file counts."""
        configured = {str(r) for r in self.settings.roots}
        held: dict[str, int] = {}
        for row in rows:
            if row.source_kind == "file" and row.root and row.root not in configured \
                    and contained_root(Path(row.source_id), self.settings.roots) is None:
                held[row.root] = held.get(row.root, 0) + 1
        return held

    def _items_to_keep(self, discard_unrecoverable: bool) -> list[tuple[SourceRow, Converted]]:
        """ingest_data and URL items with their text rebuilt from the stored chunks, for `sync --clean`.

        A rebuild from disk cannot bring them back, so when their text is unreadable the
        rebuild refuses and names them, unless told to discard them.
        """
        try:
            items = [s for s in self.index.item_sources() if not s.error_code]
        except ApplianceError:
            items = []  # the sources table itself is unreadable: nothing can be named or kept
        if not items:
            return []
        try:
            by_source = self.index.chunks_by_source(None, HIT_COLUMNS)
        except ApplianceError as exc:
            if discard_unrecoverable:
                return []
            names = ", ".join(s.source_id for s in items[:20]) + (" …" if len(items) > 20 else "")
            raise IndexCorrupt(
                f"The stored text of {len(items)} ingest_data/URL items is unreadable ({exc.message}), so a "
                f"rebuild would lose them: {names}",
                hint="Re-ingest them after the rebuild, then run `minirag sync --clean --discard-unrecoverable`; "
                     "files on disk are always rebuilt.") from exc
        kept = []
        for item in items:
            chunks = by_source.get(item.source_id)
            if not chunks:
                continue
            try:
                metadata = json.loads(item.metadata or "{}")
            except ValueError:
                metadata = {}
            text = reconstruct([row_to_chunk(r) for r in chunks])
            kept.append((item, Converted(markdown=text, title=item.title or None, ocr_engine=item.ocr_engine,
                                         has_lines=chunks[0]["start_line"] is not None, metadata=metadata)))
        return kept

    def _rebuildable_in_place(self) -> bool:
        """True when both tables read whole and hold vectors of the configured size."""
        try:
            stored = self.index.read_identity()
            if stored is not None and stored.dim != self.spec.dim:
                return False
            self.index.read_everything()
            return True
        except ApplianceError:
            return False

    def _inconsistent(self, known: dict[str, SourceRow], on_disk: set[str],
                      under: Path | None) -> tuple[frozenset[str], list[str]]:
        """What a killed write left behind: (files whose chunks differ from their source row, chunks of no source).

        A process killed between deleting a source's old chunks and recording it again
        (a re-ingest, a delete) leaves a source row that no longer matches the chunks;
        one killed before recording a new file leaves chunks without a row. Both are
        seen by counting chunks per source, so the next sync re-indexes or removes them.
        """
        counts = self.index.chunk_counts()
        damaged = frozenset(sid for sid, row in known.items() if sid in on_disk
                            and counts.get(sid, 0) != (0 if row.error_code else row.chunk_count))
        stray = [sid for sid in counts if sid.startswith("/") and sid not in known and sid not in on_disk
                 and (under is None or Path(sid) == under or Path(sid).is_relative_to(under))]
        if stray:
            recorded = self.index.sources_by_id(stray)
            stray = [sid for sid in stray if sid not in recorded]
        return damaged, stray

    def ingest_data(self, source_id: str, content: str, fmt: str = "markdown", *,
                    title: str | None = None) -> RunReport:
        """Index content the caller holds under a source id of its choosing."""
        source_id = self._checked_data(source_id, content, fmt)
        converted = convert.convert_data(content, fmt, title=title)
        digest = hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()
        return self._ingest_converted(source_id, "data", converted, digest, len(content))

    def _checked_data(self, source_id: str, content: str, fmt: str) -> str:
        """ingest_data's arguments checked (the source id as stored), before any work or job."""
        source_id = _valid_source_id(source_id)
        if fmt not in ("text", "markdown", "html"):
            raise InvalidArgument(f"format must be one of text, markdown, html, not {fmt!r}")
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgument("content must be non-empty text")
        if _utf8_size(content) > self.settings.max_file_size:
            raise InvalidArgument(f"content is larger than MAX_FILE_SIZE ({self.settings.max_file_size} bytes)")
        self._check_writable_identity()
        return source_id

    def ingest_url(self, url: str, *, source_id: str | None = None) -> RunReport:
        """Fetch one http(s) URL (opt-in: ALLOW_URL_INGEST) and index it under the URL or `source_id`."""
        key, converted = self._fetch_url(url, source_id)
        return self._ingest_fetched(key, converted)

    def _fetch_url(self, url: str, source_id: str | None) -> tuple[str, Converted]:
        """(source id, the page as Markdown): the download, bounded by the fetcher's timeout and size cap."""
        if not self.settings.allow_url_ingest:
            raise UrlIngestDisabled("URL ingestion is disabled in this appliance")
        from appliance.ingest.fetch import fetch_to_converted

        key = _valid_source_id(source_id or url)
        self._check_writable_identity()
        converted = fetch_to_converted(url, allow_private=self.settings.allow_private_urls,
                                       max_bytes=min(self.settings.max_file_size, 50 * 1024 * 1024))
        return key, converted

    def _ingest_fetched(self, key: str, converted: Converted) -> RunReport:
        digest = hashlib.sha256(converted.markdown.encode("utf-8", "surrogatepass")).hexdigest()
        return self._ingest_converted(key, "url", converted, digest, len(converted.markdown))

    def _ingest_converted(self, source_id: str, kind: str, converted: Converted, digest: str, size: int) -> RunReport:
        report = RunReport(seen=1)
        existed = self.index.source(source_id) is not None
        source = SourceRow(source_id=source_id, source_kind=kind, path=source_id, content_hash=digest, size=size)
        self._write_batch([(source, converted)], report, self._embedding(report))
        report.added, report.updated = (0, 1) if existed else (1, 0)
        self.index.refresh_indexes()
        return self._finish(report)

    def delete(self, target: str, is_source: bool = False, *, require_absolute: bool = False) -> dict[str, Any]:
        """Remove a file, data item or URL item from the index (never from disk)."""
        source_id = self._source_id_for(target, is_source, require_absolute=require_absolute)
        recorded = self.index.source(source_id)
        chunks = self.index.count_chunks_of(source_id)
        if recorded is None and not chunks:
            raise NotFound(f"Nothing indexed for {source_id}", hint="`minirag list` shows what is indexed.")
        self.index.delete_sources([source_id])
        return {"source": source_id, "deleted": True, "chunksRemoved": chunks}

    def _collect(self, item: FoundFile | Skipped, files: list[FoundFile], report: RunReport) -> None:
        if isinstance(item, FoundFile):
            files.append(item)
        else:
            report.skipped.append({"path": printable(item.path), "code": item.code, "reason": item.reason})

    def _check_writable_identity(self) -> None:
        problem = self.identity_problem()
        if problem:
            raise IndexMismatch(problem)
        if self.index.read_identity() is None:
            self.index.write_identity(self.identity())

    def _classify(self, f: FoundFile, old: SourceRow | None, force: bool) -> tuple[str, str]:
        """(what to do, content hash): unchanged, refresh, failed, error (unreadable) or index."""
        fresh = (old if old is not None and not old.error_code and old.scheme == SCHEME_VERSION
                 and old.model_id == self.spec.id else None)  # the row, when it is current
        if not force and fresh is not None and self.settings.change_detection == "stat" \
                and fresh.mtime_ns == f.mtime_ns and fresh.size == f.size:
            return "unchanged", fresh.content_hash
        try:
            digest = content_hash(f.path)
        except OSError as exc:
            return "error", exc.strerror or str(exc)
        if not force and fresh is not None and fresh.content_hash == digest:
            return "refresh", digest
        if not force and old is not None and old.error_code and old.content_hash == digest \
                and old.mtime_ns == f.mtime_ns:
            return "failed", digest
        return "index", digest

    def _index_files(self, files: Sequence[FoundFile], report: RunReport,
                     on_file: Callable[[int, int, str], None] | None, embed: ReusingEmbed,
                     *, known: dict[str, SourceRow], force: bool, gone: Sequence[str] = (),
                     redo: frozenset[str] = frozenset()) -> None:
        """Convert (in worker processes) while embedding and writing earlier files; `redo` names
        files to re-index even when unchanged.

        A dated snapshot sequence in which anything changed is re-indexed as a
        whole, in date order, in one write, so its de-duplication stays exact.
        """
        plans = {f.path: (f, *self._classify(f, known.get(str(f.path)), force or str(f.path) in redo)) for f in files}
        members: dict[Path, Member] = {}
        if self.settings.snapshot_dedupe:
            every = snapshot_members([*plans, *(Path(g) for g in gone)])
            touched = {m.group for p, m in every.items() if p not in plans or plans[p][1] == "index"}
            members = {p: m for p, m in every.items() if p in plans and m.group in touched}
        todo: list[tuple[FoundFile, str]] = []
        unreadable: list[SourceRow] = []
        for path, (f, kind, digest) in plans.items():
            if path in members and kind in ("unchanged", "refresh", "failed"):
                kind, digest = "index", content_hash(path) if kind == "unchanged" else digest
            old = known.get(str(path))
            if kind == "unchanged":
                report.unchanged += 1
            elif kind == "refresh":
                assert old is not None  # _classify refreshes only a known row
                self.index.record_sources([_replace_stat(old, f)])
                report.refreshed += 1
            elif kind == "failed":
                assert old is not None  # _classify reports a failure again only for a known row
                report.failed.append({"path": str(path), "code": old.error_code, "reason": old.error})
            elif kind == "error":
                report.failed.append({"path": str(path), "code": "unreadable", "reason": digest})
                if old is None or old.error_code != "unreadable" or (old.mtime_ns, old.size) != (f.mtime_ns, f.size):
                    unreadable.append(SourceRow(source_id=str(path), source_kind="file", root=str(f.root),
                                                path=f.display, mtime_ns=f.mtime_ns, size=f.size,
                                                ingested_at=time.time(),
                                                error_code="unreadable", error=f"cannot read the file: {digest}"))
            else:
                todo.append((f, digest))
        if unreadable:  # what can no longer be read is no longer served either
            self.index.replace_sources(unreadable, [])
        if not todo:
            return
        todo.sort(key=lambda item: str(item[0].path))
        waiting: dict[str, int] = {}
        for f, _ in todo:
            if f.path in members:
                waiting[members[f.path].group] = waiting.get(members[f.path].group, 0) + 1
        sequences: dict[str, list[tuple[str, SourceRow, Converted]]] = {}
        by_path = {f.path: (f, digest) for f, digest in todo}
        with self._pool() as pool, EmbedWritePipeline(
                embed, lambda works: self._store(works, report),
                ahead_chunks=EMBED_AHEAD_CHUNKS, batch_chunks=EMBED_BATCH_CHUNKS) as pipeline:
            stream = pool.imap([f.path for f, _ in todo], in_flight=CONVERT_AHEAD, max_bytes=CONVERT_AHEAD_BYTES)
            for done, (path, result) in enumerate(stream, start=1):
                f, digest = by_path[path]
                old = known.get(str(path))
                source = SourceRow(source_id=str(path), source_kind="file", root=str(f.root), path=f.display,
                                   content_hash=digest, mtime_ns=f.mtime_ns, size=f.size)
                if isinstance(result, ApplianceError):
                    pipeline.put(Work([_failed(source, result)]))
                    report.failed.append({"path": str(path), "code": result.code, "reason": result.message})
                else:
                    if old is None:
                        report.added += 1
                    else:
                        report.updated += 1
                    if path in members:
                        sequences.setdefault(members[path].group, []).append((members[path].date, source, result))
                    else:
                        pipeline.put(self._prepare([(source, result)]))
                member = members.get(path)
                if member is not None:
                    waiting[member.group] -= 1
                    if waiting[member.group] == 0:
                        sequence = sorted(sequences.pop(member.group, []), key=lambda item: item[0])
                        pipeline.put(self._prepare([(s_, c_) for _d, s_, c_ in sequence],
                                                   snapshot_dates=[d for d, _s, _c in sequence]))
                if on_file:
                    on_file(done, len(todo), str(path))
            pipeline.close()
        self.index.refresh_indexes()

    def _write_batch(self, batch: list[tuple[SourceRow, Converted]], report: RunReport, embed: ReusingEmbed) -> None:
        """Chunk, embed and store converted documents in one write, on this thread."""
        work = self._prepare(batch)
        work.embed_with(embed)
        self._store([work], report)

    def _embedding(self, report: RunReport, *, reuse: bool = True) -> ReusingEmbed:
        """The model behind a lookup of vectors already in the index (reuse.py), counted into
        `report`; `reuse=False` (sync --clean, which trusts nothing stored) asks the model for
        every text, each distinct one once."""
        lookup = (IndexLookup(self.index, self.spec.id, SCHEME_VERSION,
                              lambda text, title: self._embedded_text(0, text, title))
                  if reuse else _nothing_known)
        return ReusingEmbed(self.embedder.embed_passages, lookup, self.spec.dim, tally=report)

    def _prepare(self, batch: list[tuple[SourceRow, Converted]], *,
                 snapshot_dates: Sequence[str] | None = None) -> Work:
        """Cut converted documents into chunk rows and the texts their vectors come from.

        With `snapshot_dates`, the batch is one dated sequence in date order and
        chunks repeated from the previous snapshot are not stored again.
        """
        budget = self.budget
        embedder = self.embedder
        now = time.time()
        cut = [chunk_document(converted.markdown, count_tokens=embedder.count_tokens, budget=budget,
                              title=converted.title, ceiling=embedder.window) for _source, converted in batch]
        if snapshot_dates is not None:
            kept = dedupe_sequence(list(zip(snapshot_dates, cut, strict=True)))
        else:
            kept = [[Kept(c) for c in chunks] for chunks in cut]
        work = Work([])
        for n, ((source, converted), survivors) in enumerate(zip(batch, kept, strict=True)):
            full = replace(source, title=converted.title or "", scheme=SCHEME_VERSION, model_id=self.spec.id,
                           chunk_count=len(survivors), ingested_at=now, ocr_engine=converted.ocr_engine,
                           doc_class=_doc_class(converted), error_code="", error="",
                           metadata=json.dumps(converted.metadata, ensure_ascii=False, sort_keys=True))
            work.sources.append(full)
            key = source_key(source.source_id)
            date = snapshot_dates[n] if snapshot_dates is not None else None
            for entry in survivors:
                text = self._embedded_text(entry.chunk.index, entry.chunk.text, converted.title)
                work.texts.append(text)
                work.rows.append(chunk_row(full, entry.chunk, key=key, has_lines=converted.has_lines,
                                           keywords=keywords_field(full.title, entry.chunk.text),
                                           embed_key=embed_key(text), snapshot_date=date,
                                           also_unchanged_on=entry.also_unchanged_on))
        return work

    def _store(self, works: list[Work], report: RunReport) -> None:
        """Write embedded works as one write: each source's chunks replaced, then its record."""
        rows = [r for w in works for r in w.rows]
        self.index.replace_sources([s for w in works for s in w.sources], rows)
        report.chunks += len(rows)

    def _embedded_text(self, chunk_index: int, text: str, title: str | None) -> str:
        """Every chunk carries its document's title into its vector (when its text lacks it and
        it fits the window): a passage cut from the middle of a document is often about what
        the title names without naming it (scripts/embedding_text_experiments.py measures it).
        The stored text stays the document's."""
        if not title or title in text:
            return text
        titled = f"# {title}\n{text}"
        return titled if self.embedder.count_tokens(titled) <= self.embedder.window else text

    def _finish(self, report: RunReport) -> RunReport:
        report.seconds = time.time() - report.started_at
        return report

    def _save_last_sync(self, report: RunReport, under: Path | None) -> None:
        data = report.to_dict() | {"finishedAt": time.time(), "scope": str(under) if under else None}
        try:
            save_last_sync(self.settings.db_path, data)
        except OSError as exc:
            raise (storage_error(exc, f"the index at {self.settings.db_path}", self.settings.db_path) or exc) from exc

    # ---- reading ---------------------------------------------------------------
    def search(self, query: str, *, top_k: int = 10, scope: str | None = None,
               doc_class: str | None = None) -> SearchResult:
        """Hybrid search: vector and BM25 in parallel, fused by normalised scores (query.hybrid.fuse)."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgument("The query is empty", hint="Ask with a few words or an exact identifier.")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidArgument(f"The query is {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise InvalidArgument(f"topK must be at least 1, not {top_k!r}")
        top_k = min(top_k, TOP_K_CAP)
        self._require_identity()
        self.index.checkout_latest()
        where = self._filters(scope, doc_class)
        fetch = max(top_k * 4, 40)
        weight = self.settings.hybrid_weight
        keyword_future = None
        if weight > 0.0:
            keyword_future = _KEYWORD_POOL.submit(self.index.keyword_side, query_terms(query), fetch, where,
                                                  RANK_COLUMNS)
        vector = self.embedder.embed_query(query)
        vector_side = self.index.vector_side(vector, fetch, where, RANK_COLUMNS)
        keyword_side = keyword_future.result() if keyword_future else Side([], 0.0, 0.0)
        found = {row["id"] for row in vector_side.rows}
        similarity = self.index.similarities(vector, [r["id"] for r in keyword_side.rows if r["id"] not in found])
        fused = fuse(vector_side, keyword_side, weight, language(query), similarity)
        fused = cap_distance(fused, self.settings.max_distance)
        fused = group_cut(fused, self.settings.grouping)
        # Twice the hits asked for, so near-identical passages can collapse and still leave top_k distinct ones.
        ranked = cap_files(fused, self.settings.max_files)[:top_k * 2]
        # Ranking reads a few narrow columns; the full rows of the hits come back with
        # their sections in one read, since every hit lies inside its own section.
        parents = sorted({h.row["parent_id"] for h in ranked})
        section_rows = self.index.section_rows(parents, HIT_COLUMNS)
        full = {row["id"]: row for row in section_rows}
        distinct = collapse([replace(h, row=full[h.id]) for h in ranked if h.id in full], top_k)
        return within_budget(assemble(query, distinct.kept, section_rows, also_in=distinct.also_in))

    def _filters(self, scope: str | None, doc_class: str | None) -> Filter | None:
        prefix = self._scope_prefix(scope) if scope else None
        if doc_class:
            known = {s.doc_class for s in self.index.source_rows()} | {"note"}
            if doc_class not in known:
                raise InvalidArgument(f"Unknown doc class {doc_class!r}",
                                      hint="Known classes: " + ", ".join(sorted(known)))
        return Filter(prefix, doc_class or None) if prefix is not None or doc_class else None

    def _scope_prefix(self, scope: str) -> str:
        """The source-id prefix of a scope; it matches at a separator: /docs/proj never matches /docs/project-x."""
        if not isinstance(scope, str) or not scope.strip() or "\x00" in scope:
            raise InvalidArgument("scope must be a non-empty path or source-id prefix")
        if scope.startswith("/") or scope.startswith("~"):
            path = Path(os.path.normpath(Path(scope).expanduser()))
            roots = self.settings.roots
            if contained_root(path, roots) is None and contained_root(path.resolve(), roots) is None \
                    and not any(r.is_relative_to(path) for r in roots):
                raise InvalidArgument(f"scope {scope!r} is outside the configured document roots")
            prefix = str(path)
        else:
            prefix = scope.rstrip("/") or scope
        return prefix.rstrip("/") if len(prefix) > 1 else prefix

    def read(self, target: str, is_source: bool = False, *, require_absolute: bool = False,
             offset: int = 0, max_chars: int | None = None, revision: str | None = None,
             start_line: int | None = None, end_line: int | None = None,
             page_start: int | None = None, page_end: int | None = None) -> dict[str, Any]:
        """A document rebuilt from its chunks (no repeated breadcrumbs or headers), whole or one page.

        A page is at most `max_chars` characters from `offset`, cut at a line end when one
        lies in its second half; `nextOffset` continues it (None at the end). `revision`
        names the text the offsets count in: a page asked with another document's or an
        older revision is refused, so a reader never stitches two versions together.

        `start_line`/`end_line` (sources with lines) or `page_start`/`page_end` (PDFs and
        scans; slides of a presentation) read only that part (1-based, inclusive; either
        bound may be left out); offsets then count in that part's text, and the revision
        is still the whole document's.
        """
        from appliance.query.ranges import check_range, line_range, page_range

        lines = start_line is not None or end_line is not None
        pages = page_start is not None or page_end is not None
        if lines and pages:
            raise InvalidArgument("Give a line range or a page range, not both")
        check_range(("startLine", "endLine"), start_line, end_line)
        check_range(("pageStart", "pageEnd"), page_start, page_end)
        source_id = self._source_id_for(target, is_source, require_absolute=require_absolute)
        rows = self.index.document_chunks(source_id, HIT_COLUMNS)
        if not rows:
            raise NotFound(f"Nothing indexed for {source_id}",
                           hint="Run `minirag sync` (or ingest the file) first; `minirag list` shows what is indexed.")
        rows.sort(key=lambda r: r["chunk_index"])
        content = reconstruct([row_to_chunk(r) for r in rows])
        current = hashlib.sha1(f"{source_id}\0{content}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
        if revision is not None and revision != current:
            raise InvalidArgument(f"revision {revision!r} is not the indexed text of {source_id} (now {current}): "
                                  "the document changed or the revision belongs to another one",
                                  hint="Read again from offset 0 without a revision.")
        part: dict[str, Any] = {}
        if lines:
            part = line_range(source_id, rows, start_line, end_line)
        elif pages:
            part = page_range(source_id, rows, page_start, page_end)
        text = part.pop("content", content)
        page, next_offset = text_page(text, offset, max_chars)
        return {"source": source_id, "sourceKind": rows[0]["source_kind"], "displayPath": rows[0]["path"],
                "title": rows[0]["title"] or None, "chunkCount": len(rows), "content": page,
                "offset": offset, "totalChars": len(text), "nextOffset": next_offset,
                "remainingChars": len(text) - (next_offset if next_offset is not None else len(text)),
                "revision": current, **part}

    def gather(self, query: str, *, top_k: int = 10, scope: str | None = None, doc_class: str | None = None,
               context_lines: int = 3) -> dict[str, Any]:
        """`search`'s answer as one Markdown block (query.gather): numbered hits with their citations
        and, for text files, `context_lines` lines of the file around each passage."""
        from appliance.ingest.textfile import read_text
        from appliance.query.gather import MAX_CONTEXT_LINES, render_markdown

        if isinstance(context_lines, bool) or not isinstance(context_lines, int) \
                or not 0 <= context_lines <= MAX_CONTEXT_LINES:
            raise InvalidArgument(
                f"contextLines must be an integer from 0 to {MAX_CONTEXT_LINES}, not {context_lines!r}")
        answer = self.search(query, top_k=top_k, scope=scope, doc_class=doc_class).to_dict()

        def read_lines(path: str) -> list[str] | None:
            try:
                target, _root = self.resolve(path)
                if target.stat().st_size > self.settings.max_file_size:
                    return None
                return read_text(target)[0].splitlines()
            except (ApplianceError, OSError, ValueError):
                return None

        return {"query": answer["query"], "resultCount": len(answer["results"]),
                "markdown": render_markdown(answer, context_lines=context_lines, read_lines=read_lines)}

    def read_neighbors(self, target: str, is_source: bool, chunk_index: int, *, before: int = 2, after: int = 2,
                       require_absolute: bool = False, max_chars: int = READ_PAGE_CHARS) -> dict[str, Any]:
        """The chunks around one hit, in document order, within `max_chars` of text.

        The hit's own chunk always comes; the others are taken nearest first, alternating
        after and before, while their text fits. `omittedBefore`/`omittedAfter` count
        the requested chunks left out (ask again from the first/last chunk returned)."""
        for name, value, low, cap in (("chunkIndex", chunk_index, 0, 10**9), ("before", before, 0, 50),
                                      ("after", after, 0, 50), ("maxChars", max_chars, 1, MAX_PAGE_CHARS)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= cap:
                raise InvalidArgument(f"{name} must be an integer from {low} to {cap}, not {value!r}")
        source_id = self._source_id_for(target, is_source, require_absolute=require_absolute)
        rows = self.index.chunks_around(source_id, chunk_index - before, chunk_index + after, HIT_COLUMNS)
        if chunk_index not in rows:
            raise NotFound(f"{source_id} has no chunk {chunk_index}")
        kept, used = {chunk_index}, len(rows[chunk_index]["text"])
        nearest = sorted((i for i in rows if i != chunk_index), key=lambda i: (abs(i - chunk_index), i < chunk_index))
        for i in nearest:
            if used + len(rows[i]["text"]) > max_chars:
                break
            kept.add(i)
            used += len(rows[i]["text"])
        return {"source": source_id, "chunkIndex": chunk_index,
                "chunks": [hit_dict(rows[i]) for i in sorted(kept)],
                "omittedBefore": sum(1 for i in rows if i < chunk_index and i not in kept),
                "omittedAfter": sum(1 for i in rows if i > chunk_index and i not in kept)}

    def _source_id_for(self, target: str, is_source: bool, *, require_absolute: bool) -> str:
        """A file path (resolved and contained) or a data/url source id, as stored.

        Without `is_source`, a target that looks like a path is taken as one.
        """
        if not isinstance(target, str) or not target.strip():
            raise InvalidArgument("Name a file path or a source id")
        if is_source:
            return _valid_source_id(target)
        if require_absolute:  # a caller that names a file path (MCP's filePath): never a source id
            return str(self.resolve(target, require_absolute=True, must_exist=False)[0])
        looks_like_path = target.startswith(("/", "~", ".")) or (os.sep in target and "://" not in target)
        if looks_like_path or Path(target).exists():
            return str(self.resolve(target, must_exist=False)[0])
        return _valid_source_id(target)

    def list_files(self, *, scope: str | None = None, include_ignored: bool = False, require_absolute: bool = False,
                   limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        """Every file under the roots with its state, then the indexed data and URL sources, in pages.

        Files come sorted by path, then sources by id; a page holds at most `limit` entries of
        both (None: all of them) and `nextCursor` continues after the last one (None at the end).
        """
        from appliance.paging import page_after

        under = self.resolve(scope, require_absolute=require_absolute)[0] if scope else None
        known = {s.source_id: s for s in self.index.source_rows()}
        files: list[dict[str, Any]] = []
        for item in walk(self.settings.roots, self.extensions(), under=under, report_skips=include_ignored):
            if isinstance(item, Skipped):
                files.append({"filePath": printable(item.path), "state": item.code, "reason": item.reason})
                continue
            old = known.pop(str(item.path), None)
            files.append(_file_state(item, old))
        others = []
        for s in known.values():
            if s.source_kind == "file":
                if under is None or Path(s.source_id).is_relative_to(under):
                    files.append({"filePath": s.source_id, "state": "missing", "chunkCount": s.chunk_count,
                                  "reason": "indexed, but no longer on disk; the next sync removes it"})
            else:
                others.append({"source": s.source_id, "sourceKind": s.source_kind, "title": s.title or None,
                               "chunkCount": s.chunk_count, "ingestedAt": s.ingested_at})
        return page_after(files, others, scope=scope, limit=limit, cursor=cursor)

    def warm_up(self) -> None:
        """Load the model and the index's search structures now, so the first real query is not cold."""
        self.embedder.load()
        # Nothing indexed yet, or an index built differently: the real query reports it.
        with contextlib.suppress(ApplianceError):
            self.search("warm up", top_k=1)

    def status(self) -> dict[str, Any]:
        """Configuration and index health; never raises for a broken index."""
        out: dict[str, Any] = {"version": __version__, "config": self.settings.describe()}
        name, hint = ocr_status(self.ocr_config())
        out["ocr"] = name
        if hint:
            out["ocrHint"] = hint
        out["model"] = {"id": self.spec.id, "dim": self.spec.dim, "maxSeqLength": self.spec.max_seq_length,
                        "baked": (self.settings.models_dir / self.spec.dir_name / "model.onnx").is_file()}
        try:
            out["chunkTokenBudget"] = self.budget
            index: dict[str, Any] = {"dbPath": str(self.settings.db_path)}
            sources = self.index.source_rows()
            index["sourceCount"] = sum(1 for s in sources if not s.error_code)
            index["failedCount"] = sum(1 for s in sources if s.error_code)
            foreign = self._foreign_roots(sources)
            if foreign:
                index["unconfiguredRoots"] = foreign
                index["rootsWarning"] = (f"{sum(foreign.values())} indexed files lie under roots this process was "
                                         "not given; a sync refuses until they are mounted where the index knows "
                                         "them or dropped with `minirag sync --forget-roots`")
            index["chunkCount"] = self.index.count_chunks()
            index["unindexedRows"] = self.index.unindexed_rows()
            index["hasKeywordIndex"] = self.index.has_fts_index()
            index["hasVectorIndex"] = self.index.has_vector_index()
            stale = self.index.count_chunks_not_cut_by(SCHEME_VERSION) if index["chunkCount"] else 0
            index["staleChunkCount"] = stale
            if stale:
                index["schemeWarning"] = (f"{stale} chunks were cut by an older chunking scheme; "
                                          "run `minirag sync` to re-cut them")
            identity = self.index.read_identity()
            index["identity"] = identity.__dict__ if identity else None
            recorded = sum(s.chunk_count for s in sources if not s.error_code)
            if recorded != index["chunkCount"] and lock_holder(self.settings.db_path) is None:  # not mid-sync
                index["consistencyWarning"] = (f"the sources table records {recorded} chunks, the chunks table holds "
                                               f"{index['chunkCount']} (an interrupted write or a damaged table); "
                                               "run `minirag sync` to repair, or `minirag sync --clean` to rebuild")
            if identity is None and index["chunkCount"]:
                index["identityWarning"] = (f"{self.index.db_path / IDENTITY_FILE} is missing, so the model the "
                                            "vectors were made with is unknown; run `minirag sync --full` to rebuild "
                                            "with the configured model")
            problem = self.identity_problem()
            if problem:
                index["identityMismatch"] = problem
                index["identityHint"] = IndexMismatch.hint
            out["index"] = index
        except ApplianceError as exc:
            out["indexError"] = exc.to_dict()
        out["syncRunning"] = running_sync(self.settings.db_path)
        out["scheduler"] = read_scheduler_state(self.settings.db_path)
        out["lastSync"] = read_last_sync(self.settings.db_path)
        out["ignoreProblems"] = ignore_problems(self.settings.roots)  # rules files that could not be applied
        return out

    # ---- exact match and background sync (the MCP server's grep / sync_start / sync_status) ----
    def grep(self, pattern: str, *, regex: bool = False, case_sensitive: bool = False, scope: str | None = None,
             root: str | None = None, file_glob: str | None = None, max_results: int = 100,
             require_absolute: bool = False) -> GrepResult:
        """Matching lines in the indexed text of every indexed document: files of every format
        (PDF, Office, EPUB, OCRed scans, text), ingest_data items and fetched pages.

        Filters: `scope` (a path under the roots), `root` (a configured root, by path or by
        list_roots' name), `file_glob` (on the display path). Files on disk that are not
        indexed (new, or failed to convert) have no indexed text and are not searched: the
        result counts them, with a note, instead of leaving them out silently.
        """
        from appliance.grep import check_max_results, compile_pattern, grep, path_glob

        compile_pattern(pattern, is_regex=regex, case_sensitive=case_sensitive)
        check_max_results(max_results)
        under = self.resolve(scope, require_absolute=require_absolute)[0] if scope else None
        root_path = self._root_named(root) if root is not None else None
        matches = path_glob(file_glob) if file_glob is not None else None

        def selected(kind: str, source_id: str, root_of: str, display: str) -> bool:
            if (under is not None or root_path is not None) and kind != "file":
                return False
            return ((under is None or Path(source_id) == under or Path(source_id).is_relative_to(under))
                    and (root_path is None or root_of == str(root_path))
                    and (matches is None or matches(display)))

        self.index.checkout_latest()
        known = {s.source_id: s for s in self.index.source_rows()}
        indexed = sorted((s for s in known.values()
                          if not s.error_code and selected(s.source_kind, s.source_id, s.root, s.path)),
                         key=lambda s: s.source_id)
        coverage = self._grep_coverage(known, len(indexed), under or root_path, selected)
        result = grep(self._grep_documents(indexed), pattern, is_regex=regex, case_sensitive=case_sensitive,
                      max_results=max_results)
        result.coverage = coverage
        return result

    def _grep_documents(self, sources: Sequence[SourceRow]) -> Iterator[GrepDoc]:
        """The documents' texts from their stored chunks, read a bounded batch at a time."""
        from appliance.grep import GREP_COLUMNS, GrepDoc, describe

        batch: list[SourceRow] = []
        chunks = 0
        for n, source in enumerate(sources):
            batch.append(source)
            chunks += max(1, source.chunk_count)
            if chunks < GREP_BATCH_CHUNKS and len(batch) < 200 and n + 1 < len(sources):
                continue
            by_source = self.index.chunks_by_source([s.source_id for s in batch], GREP_COLUMNS)
            for s in batch:
                mine = by_source.get(s.source_id)
                yield GrepDoc.from_rows(mine) if mine else GrepDoc.empty(
                    describe(s.source_id, s.source_kind, s.path, s.title))
            batch, chunks = [], 0

    def _grep_coverage(self, known: dict[str, SourceRow], indexed: int, under: Path | None,
                       selected: Callable[[str, str, str, str], bool]) -> dict[str, Any]:
        """What grep cannot search among the files the filters select: new (not indexed yet) and
        failed files, and changed ones (searched as last indexed), with a sentence saying so."""
        new = failed = changed = 0
        if under is not None and under.is_file():
            under = under.parent  # the scan's own view of the file: its extension, the ignore rules
        for item in walk(self.settings.roots, self.extensions(), under=under):
            if not isinstance(item, FoundFile) or not selected("file", str(item.path), str(item.root), item.display):
                continue
            old = known.get(str(item.path))
            if old is None:
                new += 1
            elif old.error_code:
                failed += 1
            elif (old.mtime_ns, old.size) != (item.mtime_ns, item.size):
                changed += 1
        notes = []
        if new or failed:
            notes.append(f"{new + failed} file(s) under the roots have no indexed text and were not searched "
                         f"({new} not indexed yet, {failed} failed to index; list_files names them)")
        if changed:
            notes.append(f"{changed} file(s) changed on disk since indexing and were searched as last indexed")
        if new or changed:
            notes.append("a sync (sync_start, or `minirag sync`) indexes them")
        if not indexed and not notes:
            notes.append("no indexed document matches the filters")
        note = "; ".join(notes) + "." if notes else None
        return {"documentsIndexed": indexed, "unindexedFiles": new, "failedFiles": failed, "staleFiles": changed,
                "note": note[0].upper() + note[1:] if note else None}

    def _root_named(self, root: str) -> Path:
        """The configured root `root` names: its path (as configured, or resolved) or its list_roots name."""
        from appliance.ingest.discover import root_names

        roots = self.settings.roots
        names = root_names(roots)
        if isinstance(root, str) and root.strip() and "\x00" not in root:
            text = root.strip()
            for path, name in zip(roots, names, strict=True):
                if text == name:
                    return path
            if text.startswith(("/", "~")):
                given: Path | None
                real: Path | None
                try:
                    given = Path(os.path.normpath(Path(text).expanduser()))
                    real = given.resolve()
                except (RuntimeError, OSError):  # ~user without a home, a link loop: no root
                    given = real = None
                for path in roots:
                    if path in (given, real):
                        return path
        listed = ", ".join(f"{name} ({path})" for name, path in zip(names, roots, strict=True))
        raise InvalidArgument(f"root {root!r} is not one of the configured roots", hint=f"The roots: {listed}.")

    def list_roots(self) -> dict[str, Any]:
        """The configured roots by name and path, with their indexed and failed file counts, and the
        counts of ingest_data and URL items (which belong to no root)."""
        from appliance.ingest.discover import root_names

        roots: list[dict[str, Any]] = [
            {"name": name, "path": str(path), "exists": path.is_dir(), "indexedFiles": None, "failedFiles": None}
            for name, path in zip(root_names(self.settings.roots), self.settings.roots, strict=True)]
        out: dict[str, Any] = {"roots": roots, "dataSources": None, "urlSources": None}
        try:
            sources = self.index.source_rows()
        except ApplianceError as exc:
            return out | {"indexError": exc.to_dict()}
        for entry in roots:
            mine = [s for s in sources if s.source_kind == "file" and s.root == entry["path"]]
            entry["indexedFiles"] = sum(1 for s in mine if not s.error_code)
            entry["failedFiles"] = sum(1 for s in mine if s.error_code)
        out["dataSources"] = sum(1 for s in sources if s.source_kind == "data")
        out["urlSources"] = sum(1 for s in sources if s.source_kind == "url")
        foreign = self._foreign_roots(sources)
        if foreign:
            out["unconfiguredRoots"] = foreign
        return out

    def sync_start(self, path: str | None = None, *, require_absolute: bool = False) -> dict[str, Any]:
        """Start `sync(path)` in a background thread and return the job; SyncBusy while a sync holds the lock."""
        from appliance.errors import SyncBusy

        if path is not None:
            self.resolve(path, require_absolute=require_absolute)
        holder = lock_holder(self.settings.db_path)
        if holder is not None:
            raise SyncBusy(f"Another sync is running (pid {holder.get('pid', '?')}) on {self.settings.db_path}")
        return self._jobs().start(path, lambda progress: self.sync(path, progress=progress, origin="mcp")).to_dict()

    def sync_status(self, job_id: str | None = None) -> dict[str, Any]:
        """A job (a sync, or an ingest too large for the foreground) started in this process; NotFound for an
        unknown id.

        Without a job id: the sync running now on this index, whoever started it (the
        scheduler, another client, `minirag sync`), the last finished sync, and this
        process's recent jobs."""
        if job_id is not None:
            return self._jobs().get(job_id).to_dict()
        return {"running": running_sync(self.settings.db_path), "lastSync": read_last_sync(self.settings.db_path),
                "jobs": [job.to_dict() for job in self._jobs().recent()]}

    def _jobs(self) -> SyncJobs:
        from appliance.jobs import SyncJobs

        jobs: SyncJobs = self.__dict__.setdefault("_sync_jobs", SyncJobs())
        return jobs

    # ---- ingests bounded in time (the MCP server's ingest_data / ingest_url) ----
    def ingest_data_bounded(self, source_id: str, content: str, fmt: str = "markdown", *,
                            title: str | None = None) -> RunReport | dict[str, Any]:
        """`ingest_data`, answered within seconds: content above INGEST_FOREGROUND_MAX_BYTES is
        embedded by a background job and the job record (poll it with sync_status) is returned.
        Bad arguments and content above MAX_FILE_SIZE are refused before any job starts."""
        key = self._checked_data(source_id, content, fmt)
        if _utf8_size(content) <= self.settings.ingest_foreground_max_bytes:
            return self.ingest_data(key, content, fmt, title=title)
        return self._jobs().start_ingest("ingest_data", key, lambda _progress: self.ingest_data(
            key, content, fmt, title=title)).to_dict()

    def ingest_url_bounded(self, url: str, *, source_id: str | None = None) -> RunReport | dict[str, Any]:
        """`ingest_url`, answered within seconds plus the download: the page is fetched in the
        foreground (the fetcher's timeout and size cap bound it, and refusals answer at once);
        a page whose Markdown is above INGEST_FOREGROUND_MAX_BYTES is embedded by a job."""
        key, converted = self._fetch_url(url, source_id)
        if _utf8_size(converted.markdown) <= self.settings.ingest_foreground_max_bytes:
            return self._ingest_fetched(key, converted)
        return self._jobs().start_ingest("ingest_url", key,
                                         lambda _progress: self._ingest_fetched(key, converted)).to_dict()


def _nothing_known(_keys: list[str]) -> dict[str, Any]:
    return {}


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _valid_source_id(source_id: str) -> str:
    if not isinstance(source_id, str) or not source_id.strip():
        raise InvalidArgument("A source id must be a non-empty string")
    if len(source_id) > MAX_SOURCE_ID_CHARS or any(ord(c) < 32 for c in source_id):
        raise InvalidArgument(
            f"A source id must be at most {MAX_SOURCE_ID_CHARS} characters without control characters")
    if source_id.startswith("/"):
        raise InvalidArgument("A data source id must not start with /; that namespace belongs to files")
    return source_id.strip()


def _doc_class(converted: Converted) -> str:
    meta = converted.metadata
    kind = (meta.get("type") or "").strip().lower()
    if kind:
        return kind
    tags = [t.strip().lower() for t in (meta.get("tags") or "").split(",") if t.strip()]
    return tags[0] if tags else "note"


def _replace_stat(old: SourceRow, f: FoundFile) -> SourceRow:
    return replace(old, mtime_ns=f.mtime_ns, size=f.size)


def _failed(source: SourceRow, exc: ApplianceError) -> SourceRow:
    return replace(source, error_code=exc.code, error=exc.message, ingested_at=time.time())


def _file_state(found: FoundFile, old: SourceRow | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"filePath": str(found.path), "displayPath": found.display, "size": found.size}
    if old is None:
        entry["state"] = "new"
    elif old.error_code:
        entry |= {"state": "failed", "reason": old.error, "code": old.error_code}
    elif old.mtime_ns != found.mtime_ns or old.size != found.size:
        entry |= {"state": "changed", "chunkCount": old.chunk_count}
    else:
        entry |= {"state": "indexed", "chunkCount": old.chunk_count, "title": old.title or None,
                  "ocrEngine": old.ocr_engine, "docClass": old.doc_class}
        try:
            missing = convert.pages_left_without_ocr(json.loads(old.metadata or "{}"))
        except ValueError:
            missing = None
        if missing:
            entry["reason"] = missing
    return entry
