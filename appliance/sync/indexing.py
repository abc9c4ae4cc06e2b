"""Documents into stored chunks: convert in workers, cut, embed (reusing stored vectors) and write.

An Indexer (LocalIndexer here, cluster.driver.RayIndexer on a cluster) turns a sync's files into
embedded rows with the public steps below (conversion_pool, prepare, embedding, failed_record) and
hands them to the one write path, `IndexBatch.write` (write_works), in the process holding the lock.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from appliance.chunks import Converted
from appliance.core import Resources, valid_source_id
from appliance.errors import (
    ApplianceError,
    Hint,
    InvalidArgument,
    NextAction,
    NotFound,
    UnsupportedFile,
    UrlIngestDisabled,
)
from appliance.ingest import markdown_blocks
from appliance.ingest.chunk import SCHEME_VERSION, chunk_document
from appliance.ingest.discover import RULES_SET_ASIDE, UNSUPPORTED, FoundFile, Skipped, printable, walk
from appliance.ingest.formats import unlisted_reason
from appliance.ingest.isolate import ConvertPool
from appliance.ingest.snapshots import Kept, Member, dedupe_sequence, snapshot_members
from appliance.platform import native_memory, stopping
from appliance.results import Deleted, FileProblem, RunReport, Tally
from appliance.search.keywords import keywords_field
from appliance.storage.locking import sync_lock
from appliance.storage.tables import SourceRow, chunk_row
from appliance.sync import plan as sync_plan, stamp as sync_stamp
from appliance.sync.pipeline import EmbedWritePipeline, Work
from appliance.sync.reuse import IndexLookup, ReusingEmbed, embed_key
from appliance.sync.state import SyncProgress, record_finished_sync

if TYPE_CHECKING:
    from appliance.ingest.fetch import FetchedPage
from appliance.sync.plan import content_hash

Progress = Callable[[str, int, int, str], None]
"""progress(phase, done, total, current_path)"""

EMBED_BATCH_CHUNKS = 128
EMBED_AHEAD_CHUNKS = 4096
"""Chunks cut and waiting for the model (a few MB of rows): enough to keep it busy for
minutes while the conversion worker is stuck in a slow PDF."""
REFRESH_BATCH = 1000
"""Files whose bytes are unchanged but whose time is new (a copy without -p, a fresh checkout, `touch`) are
recorded this many to a write. One write per file, each a commit and a table version, and each upsert slower
than the last, took 354 s for 2,000 such files (scripts/bench_sync.py), so a touched share re-synced for hours."""
CONVERT_AHEAD = 64
CONVERT_AHEAD_BYTES = 32 * 1024 * 1024
"""Files (and their bytes on disk) converted ahead of the embedder, so conversion overlaps
embedding. With 16 files the embedder sat idle behind every slow PDF: 69% busy over
the corpus; the byte bound keeps the converted text waiting in memory small."""
WORKER_RECYCLE_FILES = 2000
"""A fresh worker costs ~3 s of imports; recycling every 200 files spent a third of a
small-file sync restarting workers. Memory stays bounded by the worker's rlimit."""


def ingest(core: Resources, paths: Sequence[str | Path], *, require_absolute: bool = False,
           progress: Progress | None = None) -> RunReport:
    """Index the named files and everything under the named directories, replacing old content."""
    report = Tally()
    files: list[FoundFile] = []
    for raw in paths:
        target, root = core.resolve(raw, require_absolute=require_absolute)
        if target.is_dir():
            for item in walk(core.settings.roots, core.extensions(), under=target, report_skips=True):
                _collect(item, files, report)
        else:
            try:
                why = unlisted_reason(target, core.extensions())
            except OSError as exc:
                why = f"cannot read the file: {exc.strerror or exc}"
            if why:
                raise UnsupportedFile(f"Cannot index {target}: {why}",
                                      hint="Indexed: " + " ".join(sorted(core.extensions()))
                                      + ", and any other file whose content is text (or gzip-compressed text).")
            st = target.stat()
            files.append(FoundFile(target, root, st.st_size, st.st_mtime_ns))
    report.seen = len(files) + len(report.skipped)
    core.check_writable_identity()
    known = core.index.registry.sources_by_id([str(f.path) for f in files])
    on_file = (lambda _converted, total, path: progress("indexing", report.files_stored, total, path)) \
        if progress else None
    _index_files(core, files, report, on_file, embedding(core, report), known=known, force=True,
                 indexer=LocalIndexer())
    return report.finish()


def sync(core: Resources, path: str | Path | None = None, *, full: bool = False, clean: bool = False,
         discard_unrecoverable: bool = False, forget_roots: bool = False, allow_deletions: bool = False,
         progress: Progress | None = None, origin: str = "cli", indexer: Indexer | None = None) -> RunReport:
    """Make the index equal to the files on disk (under `path`, when given).

    `clean` rebuilds everything: files, and ingest_data/URL items re-embedded from
    their stored text. A readable index is rebuilt in place, so readers in other
    processes keep answering from the old rows until each document's new ones
    replace them; a damaged one gets empty tables first (as new versions, so a
    reader holding the old version is not pulled from under its feet).

    A sync of every root keeps the files of a root that is missing, unreadable, empty or
    lost most of its files at once (sync.plan.held_roots; the report's held_roots names
    them), unless `allow_deletions`; a sync under `path` deletes what is gone there.

    While it runs, its progress is published beside the lock for every process
    (`status`, `sync_status`; see state.SyncProgress); `origin` says who started it. `indexer`
    converts, cuts and embeds the files to (re)index (default: LocalIndexer, in this process);
    whichever it is, this process alone writes. How a sync is run for a caller (a stamp replay,
    a warm server, Ray) is decided by appliance.sync.runner.
    """
    if clean and path is not None:
        raise InvalidArgument("--clean rebuilds the whole index; run it without a path")
    with sync_lock(core.settings.db_path, core.settings.bucket):
        publisher = SyncProgress(core.settings.db_path, origin, forward=progress)
        try:
            return _sync_locked(core, path, full=full, clean=clean, discard_unrecoverable=discard_unrecoverable,
                                forget_roots=forget_roots, allow_deletions=allow_deletions, publisher=publisher,
                                indexer=indexer or LocalIndexer())
        finally:
            publisher.close()


def _sync_locked(core: Resources, path: str | Path | None, *, full: bool, clean: bool, discard_unrecoverable: bool,
                 forget_roots: bool, allow_deletions: bool, publisher: SyncProgress, indexer: Indexer) -> RunReport:
    report = Tally()
    under = None
    if path is not None:
        under, _root = core.resolve(path)
    kept: list[tuple[SourceRow, Converted]] = []
    if clean:
        kept = sync_plan.items_to_keep(core, discard_unrecoverable)
        if not sync_plan.rebuildable_in_place(core):
            core.index.writes.drop_all()
        full = True
    elif not full:
        core.check_writable_identity()
    stampable = under is None and not full and core.settings.change_detection == "stat"
    index_before = sync_stamp.index_state(core.settings.db_path) if stampable else None
    extensions = core.extensions()
    files: list[FoundFile] = []
    seen = sync_stamp.FilesDigest() if index_before is not None else None  # only what a stamp would need
    for item in walk(core.settings.roots, extensions, under=under, report_skips=True):
        _collect(item, files, report)
        if seen is not None:
            seen.add(item)
        publisher.scanning(len(files) + len(report.skipped))
    report.seen = len(files) + len(report.skipped)
    known = {s.source_id: s for s in core.index.registry.file_sources()}
    if under is not None:
        known = {k: v for k, v in known.items() if Path(k) == under or Path(k).is_relative_to(under)}
    elif not clean:
        sync_plan.check_roots(core, known.values(), forget=forget_roots)
    # a skipped file keeps what was indexed for it, unless it is a link that leads nowhere now, a file
    # this process may no longer read (what its owner withdrew is not served either), or one that
    # rules now exclude or that is no longer of a type indexed
    on_disk = {str(f.path) for f in files} | {s.path for s in report.skipped
                                              if s.code not in ("broken_link", "unreadable", "ignored", UNSUPPORTED)}
    gone = [sid for sid in known if sid not in on_disk]
    if gone and under is None and not allow_deletions:
        report.held_roots = sync_plan.held_roots(core, known.values(), on_disk)
        held = tuple(h.root.rstrip("/") + "/" for h in report.held_roots)
        gone = [sid for sid in gone if not sid.startswith(held)] if held else gone
    damaged, stray = sync_plan.inconsistent(core, known, on_disk, under)
    if stray:
        core.index.writes.delete_sources(stray)
    if full:
        core.index.write_identity(core.identity())
    embed = embedding(core, report, reuse=not clean)
    _index_files(core, files, report, lambda converted, total, p: publisher.indexing(
        report.files_stored, total, p, report.chunks, report.embedded, report.reused, converted=converted,
        cut=report.chunks_cut), embed, known=known, force=full, indexer=indexer, reuse=not clean, gone=gone,
        redo=damaged)
    for start in range(0, len(kept), EMBED_BATCH_CHUNKS):
        _write_batch(core, kept[start:start + EMBED_BATCH_CHUNKS], report, embed)
    if gone:  # after indexing: a moved file's vectors were still there to be reused
        core.index.writes.delete_sources(gone)
        report.deleted = len(gone)
    publisher.finishing(report.chunks)
    report.seen += len(kept)
    report.updated += len(kept)
    core.index.writes.refresh_indexes(settle=True)
    if under is None and not full:
        _recut_identity(core)
    result = report.finish()
    record_finished_sync(core.settings.db_path, result.to_dict(), under)
    if seen is not None and index_before is not None and sync_stamp.nothing_changed(result) \
            and sync_stamp.index_state(core.settings.db_path) == index_before:  # nor did anyone else commit
        sync_stamp.record(core.settings.db_path, sync_stamp.Stamp(
            sync_stamp.inputs_digest(core.settings), index_before, seen.hexdigest(), result.to_dict()))
    return result


def _recut_identity(core: Resources) -> None:
    """identity.json names the current chunking scheme once no chunk of another one is left (a plain
    sync re-cuts them file by file); until then `status` warns that the index is of another scheme."""
    stored = core.index.read_identity()
    if stored is not None and stored.scheme != SCHEME_VERSION \
            and not core.index.registry.count_chunks_not_cut_by(SCHEME_VERSION):
        core.index.write_identity(replace(stored, scheme=SCHEME_VERSION))


def ingest_data(core: Resources, source_id: str, content: str, fmt: str = "markdown", *,
                title: str | None = None) -> RunReport:
    """Index content the caller holds under a source id of its choosing; converted in a worker
    process (isolate.py) under CONVERT_TIMEOUT and CONVERT_MEMORY_MB, whatever its format."""
    source_id = checked_data(core, source_id, content, fmt)
    converted = core.untrusted_pool().convert_data(content, fmt, title=title, label=source_id)
    digest = hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()
    return _ingest_converted(core, source_id, "data", converted, digest, len(content))


def checked_data(core: Resources, source_id: str, content: str, fmt: str) -> str:
    """ingest_data's arguments checked (the source id as stored), before any work or job."""
    source_id = valid_source_id(source_id)
    if fmt not in ("text", "markdown", "html"):
        raise InvalidArgument(f"format must be one of text, markdown, html, not {fmt!r}")
    if not isinstance(content, str) or not content.strip():
        raise InvalidArgument("content must be non-empty text")
    if utf8_size(content) > core.settings.max_file_size:
        raise InvalidArgument(f"content is larger than MAX_FILE_SIZE ({core.settings.max_file_size} bytes)")
    core.check_writable_identity()
    return source_id


def ingest_url(core: Resources, url: str, *, source_id: str | None = None) -> RunReport:
    """Fetch one http(s) URL (opt-in: ALLOW_URL_INGEST) and index it under the URL or `source_id`."""
    key, page = fetch_page(core, url, source_id)
    return ingest_fetched(core, key, convert_page(core, page))


def fetch_page(core: Resources, url: str, source_id: str | None) -> tuple[str, FetchedPage]:
    """(source id, the page's bytes): the download, bounded by the fetcher's timeout and size cap."""
    if not core.settings.allow_url_ingest:
        raise UrlIngestDisabled("URL ingestion is disabled in this appliance")
    from appliance.ingest import fetch

    key = valid_source_id(source_id or url)
    core.check_writable_identity()
    return key, fetch.fetch_url(url, allow_private=core.settings.allow_private_urls, max_bytes=_url_max_bytes(core))


def convert_page(core: Resources, page: FetchedPage) -> Converted:
    """A fetched page as Markdown, converted in a worker process under the limits of a file's
    conversion: the page is never parsed in this process."""
    return core.untrusted_pool().convert_page(page, max_bytes=_url_max_bytes(core))


def _url_max_bytes(core: Resources) -> int:
    return min(core.settings.max_file_size, 50 * 1024 * 1024)


def ingest_fetched(core: Resources, key: str, converted: Converted) -> RunReport:
    digest = hashlib.sha256(converted.markdown.encode("utf-8", "surrogatepass")).hexdigest()
    return _ingest_converted(core, key, "url", converted, digest, len(converted.markdown))


def _ingest_converted(core: Resources, source_id: str, kind: str, converted: Converted, digest: str,
                      size: int) -> RunReport:
    """One document in one write, embedded a batch at a time: a cancel of its job
    (stopping.Scope) or a stop of the process ends it between batches, before anything is written."""
    report = Tally(seen=1)
    existed = core.index.registry.source(source_id) is not None
    source = SourceRow(source_id=source_id, source_kind=kind, path=source_id, content_hash=digest, size=size)
    try:
        work = prepare(core, [(source, converted)])
        markdown_blocks.parse.cache_clear()  # the cut document's parse (~10x its size) is not kept while embedding
        embed = embedding(core, report)
        for start in range(0, len(work.texts), EMBED_BATCH_CHUNKS):
            stopping.check()
            end = start + EMBED_BATCH_CHUNKS
            Work([], work.rows[start:end], work.texts[start:end]).embed_with(embed)
        stopping.check()
        write_works(core, [work], report)
    finally:
        markdown_blocks.parse.cache_clear()
        native_memory.give_back()  # a large document's rows and parse, freed, go back to the system
    report.added, report.updated = (0, 1) if existed else (1, 0)
    core.index.writes.refresh_indexes()
    return report.finish()


def delete(core: Resources, target: str, is_source: bool = False, *, require_absolute: bool = False) -> Deleted:
    """Remove a file, data item or URL item from the index (never from disk)."""
    source_id = core.source_id_for(target, is_source, require_absolute=require_absolute)
    recorded = core.index.registry.source(source_id)
    chunks = core.index.registry.count_chunks_of(source_id)
    if recorded is None and not chunks:
        raise NotFound(f"Nothing indexed for {source_id}", hint=Hint("{} shows what is indexed.", NextAction("list")))
    core.index.writes.delete_sources([source_id])
    return Deleted(source=source_id, chunks_removed=chunks)


def _collect(item: FoundFile | Skipped, files: list[FoundFile], report: Tally) -> None:
    if isinstance(item, FoundFile):
        files.append(item)
    elif item.code == RULES_SET_ASIDE:
        report.rules_set_aside.append(FileProblem(printable(item.path), item.code, item.reason))
    else:
        report.skipped.append(FileProblem(printable(item.path), item.code, item.reason))


def _index_files(core: Resources, files: Sequence[FoundFile], report: Tally,
                 on_file: Callable[[int, int, str], None] | None, embed: ReusingEmbed,
                 *, known: dict[str, SourceRow], force: bool, indexer: Indexer, reuse: bool = True,
                 gone: Sequence[str] = (), redo: frozenset[str] = frozenset()) -> None:
    """Decide what each file needs; the files to (re)index go to `indexer`, which converts them
    while embedding and writing earlier ones; `redo` names files to re-index even when unchanged.
    `on_file(converted, total, path)` follows each conversion, and every pipeline.TICK_S while
    the model is behind (`report` counts the files and chunks stored).

    A dated snapshot sequence in which anything changed is re-indexed as a
    whole, in date order, in one write, so its de-duplication stays exact.
    """
    plans = {f.path: (f, *sync_plan.classify(core, f, known.get(str(f.path)), force or str(f.path) in redo))
             for f in files}
    members: dict[Path, Member] = {}
    if core.settings.snapshot_dedupe:
        every = snapshot_members([*plans, *(Path(g) for g in gone)])
        touched = {m.group for p, m in every.items() if p not in plans or plans[p][1] == "index"}
        members = {p: m for p, m in every.items() if p in plans and m.group in touched}
    todo: list[tuple[FoundFile, str]] = []
    unreadable: list[SourceRow] = []
    refreshed: list[SourceRow] = []
    for path, (f, kind, digest) in plans.items():
        if path in members and kind in ("unchanged", "refresh", "failed"):
            kind, digest = "index", content_hash(path) if kind == "unchanged" else digest
        old = known.get(str(path))
        if kind == "unchanged":
            report.unchanged += 1
        elif kind == "refresh":
            assert old is not None  # _classify refreshes only a known row
            refreshed.append(_replace_stat(old, f))
            if len(refreshed) == REFRESH_BATCH:
                core.index.writes.record_sources(refreshed)
                refreshed = []
            report.refreshed += 1
        elif kind == "failed":
            assert old is not None  # _classify reports a failure again only for a known row
            report.failed.append(FileProblem(str(path), old.error_code, old.error))
        elif kind == "error":
            report.failed.append(FileProblem(str(path), "unreadable", digest))
            if old is None or old.error_code != "unreadable" or (old.mtime_ns, old.size) != (f.mtime_ns, f.size):
                unreadable.append(SourceRow(source_id=str(path), source_kind="file", root=str(f.root),
                                            path=f.display, mtime_ns=f.mtime_ns, size=f.size,
                                            ingested_at=time.time(),
                                            error_code="unreadable", error=f"cannot read the file: {digest}"))
        else:
            todo.append((f, digest))
    core.index.writes.record_sources(refreshed)
    if unreadable:  # what can no longer be read is no longer served either
        core.index.writes.replace_sources(unreadable, [])
    if not todo:
        return
    todo.sort(key=lambda item: str(item[0].path))
    indexer.index(IndexBatch(core, todo, members, known, report, on_file, embed, reuse))
    core.index.writes.refresh_indexes()


@dataclass
class IndexBatch:
    """The files a sync or an ingest (re)indexes, in path order, and what writing them needs."""

    core: Resources
    todo: list[tuple[FoundFile, str]]
    """(file, content hash)"""
    members: dict[Path, Member]
    """The members of dated snapshot sequences among them: a sequence is cut and written as one unit."""
    known: dict[str, SourceRow]
    """What the index held for them before: an added or an updated file."""
    report: Tally
    on_file: Callable[[int, int, str], None] | None
    """on_file(converted, total, path)"""
    embed: ReusingEmbed
    """The model behind a lookup of the vectors already stored (none with `reuse` off: sync --clean)."""
    reuse: bool = True

    def write(self, works: list[Work]) -> None:
        """The one write path: embedded works committed as one write (write_works)."""
        write_works(self.core, works, self.report)

    def embedded_all(self) -> None:
        """Every file is converted and embedded: only writes are left (a round then lets the next one start)."""


class Indexer(Protocol):
    """What converts, cuts and embeds a batch's files and writes them through `batch.write`: this
    process (LocalIndexer) or the tasks of a Ray cluster (cluster.driver.RayIndexer). The caller
    that syncs passes it in; the writes always happen in the process that holds the sync lock."""

    def index(self, batch: IndexBatch) -> None: ...


class LocalIndexer:
    """Converts in worker processes of this machine while the model embeds and a thread writes."""

    def index(self, batch: IndexBatch) -> None:
        core, todo, members, known, report, on_file = (batch.core, batch.todo, batch.members, batch.known,
                                                       batch.report, batch.on_file)
        waiting: dict[str, int] = {}
        for f, _ in todo:
            if f.path in members:
                waiting[members[f.path].group] = waiting.get(members[f.path].group, 0) + 1
        sequences: dict[str, list[tuple[str, SourceRow, Converted]]] = {}
        by_path = {f.path: (f, digest) for f, digest in todo}
        at: list[tuple[int, str]] = [(0, "")]  # files converted, the last one's path: what a tick reports

        def put(work: Work) -> None:
            report.chunks_cut += len(work.rows)
            pipeline.put(work)

        with conversion_pool(core) as pool, EmbedWritePipeline(
                batch.embed, batch.write,
                ahead_chunks=EMBED_AHEAD_CHUNKS, batch_chunks=EMBED_BATCH_CHUNKS,
                tick=(lambda: on_file(at[0][0], len(todo), at[0][1])) if on_file else None,
                embedded_all=batch.embedded_all) as pipeline:
            stream = pool.imap([f.path for f, _ in todo], in_flight=CONVERT_AHEAD, max_bytes=CONVERT_AHEAD_BYTES)
            for done, (path, result) in enumerate(stream, start=1):
                at[0] = (done, str(path))
                f, digest = by_path[path]
                old = known.get(str(path))
                source = SourceRow(source_id=str(path), source_kind="file", root=str(f.root), path=f.display,
                                   content_hash=digest, mtime_ns=f.mtime_ns, size=f.size)
                if isinstance(result, ApplianceError):
                    put(Work([failed_record(source, result)]))
                    report.failed.append(FileProblem(str(path), result.code, result.message))
                else:
                    if old is None:
                        report.added += 1
                    else:
                        report.updated += 1
                    if path in members:
                        sequences.setdefault(members[path].group, []).append((members[path].date, source, result))
                    else:
                        put(prepare(core, [(source, result)]))
                member = members.get(path)
                if member is not None:
                    waiting[member.group] -= 1
                    if waiting[member.group] == 0:
                        sequence = sorted(sequences.pop(member.group, []), key=lambda item: item[0])
                        put(prepare(core, [(s_, c_) for _d, s_, c_ in sequence],
                                    snapshot_dates=[d for d, _s, _c in sequence]))
                if on_file:
                    on_file(done, len(todo), str(path))
            pipeline.close()


def _write_batch(core: Resources, batch: list[tuple[SourceRow, Converted]], report: Tally, embed: ReusingEmbed) -> None:
    """Chunk, embed and store converted documents in one write, on this thread."""
    work = prepare(core, batch)
    work.embed_with(embed)
    write_works(core, [work], report)


def embedding(core: Resources, report: Tally, *, reuse: bool = True) -> ReusingEmbed:
    """The model behind a lookup of vectors already in the index (reuse.py), counted into
    `report`; `reuse=False` (sync --clean, which trusts nothing stored) asks the model for
    every text, each distinct one once."""
    lookup = (IndexLookup(core.index, core.spec.id, SCHEME_VERSION,
                          lambda text, title: embedded_text(core, 0, text, title))
              if reuse else _nothing_known)
    return ReusingEmbed(core.embedder.embed_passages, lookup, core.spec.dim, tally=report)


def prepare(core: Resources, batch: list[tuple[SourceRow, Converted]], *,
            snapshot_dates: Sequence[str] | None = None) -> Work:
    """Cut converted documents into chunk rows and the texts their vectors come from.

    With `snapshot_dates`, the batch is one dated sequence in date order and
    chunks repeated from the previous snapshot are not stored again.
    """
    budget = core.budget
    embedder = core.embedder
    now = time.time()
    cut = [chunk_document(converted.markdown, count_tokens=_stoppable(embedder.count_tokens), budget=budget,
                          title=converted.title, ceiling=embedder.window, syntax=converted.metadata.get("syntax"))
           for _source, converted in batch]
    if snapshot_dates is not None:
        kept = dedupe_sequence(list(zip(snapshot_dates, cut, strict=True)))
    else:
        kept = [[Kept(c) for c in chunks] for chunks in cut]
    work = Work([])
    for n, ((source, converted), survivors) in enumerate(zip(batch, kept, strict=True)):
        full = replace(source, title=converted.title or "", scheme=SCHEME_VERSION, model_id=core.spec.id,
                       chunk_count=len(survivors), ingested_at=now, ocr_engine=converted.ocr_engine,
                       doc_class=_doc_class(converted), error_code="", error="",
                       metadata=json.dumps(converted.metadata, ensure_ascii=False, sort_keys=True))
        work.sources.append(full)
        key = source_key(source.source_id)
        date = snapshot_dates[n] if snapshot_dates is not None else None
        for entry in survivors:
            text = embedded_text(core, entry.chunk.index, entry.chunk.text, converted.title)
            work.texts.append(text)
            work.rows.append(chunk_row(full, entry.chunk, key=key, has_lines=converted.has_lines,
                                       keywords=keywords_field(full.title, entry.chunk.text),
                                       embed_key=embed_key(text), snapshot_date=date,
                                       also_unchanged_on=entry.also_unchanged_on))
    return work


def _stoppable(count_tokens: Callable[[str], int]) -> Callable[[str], int]:
    """The token counter, as a point where cutting a long document leaves at a stop or a cancel
    (stopping.check; the chunker counts tokens all along, so a 20 MB document stops within moments)."""
    def count(text: str) -> int:
        stopping.check()
        return count_tokens(text)
    return count


def write_works(core: Resources, works: list[Work], report: Tally) -> None:
    """Write embedded works as one write: each source's chunks replaced, then its record."""
    rows = [r for w in works for r in w.rows]
    sources = [s for w in works for s in w.sources]
    core.index.writes.replace_sources(sources, rows)
    report.chunks += len(rows)
    report.files_stored += len(sources)


def embedded_text(core: Resources, chunk_index: int, text: str, title: str | None) -> str:
    """Every chunk carries its document's title into its vector (when its text lacks it and
    it fits the window): a passage cut from the middle of a document is often about what
    the title names without naming it (scripts/embedding_text_experiments.py measures it).
    The stored text stays the document's."""
    if not title or title in text:
        return text
    titled = f"# {title}\n{text}"
    return titled if core.embedder.count_tokens(titled) <= core.embedder.window else text


def conversion_pool(core: Resources) -> ConvertPool:
    """The conversion workers of a sync (a Ray node makes its own, one worker)."""
    return ConvertPool(workers=core.settings.convert_workers, timeout_s=core.settings.convert_timeout_s,
                       memory_bytes=core.settings.convert_memory_mb * 1024 * 1024,
                       ocr=core.ocr_config(), max_file_size=core.settings.max_file_size,
                       max_tasks_per_worker=WORKER_RECYCLE_FILES)


def source_key(source_id: str) -> str:
    return hashlib.sha1(source_id.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _nothing_known(_keys: list[str]) -> dict[str, Any]:
    return {}


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _doc_class(converted: Converted) -> str:
    meta = converted.metadata
    kind = (meta.get("type") or "").strip().lower()
    if kind:
        return kind
    tags = [t.strip().lower() for t in (meta.get("tags") or "").split(",") if t.strip()]
    return tags[0] if tags else "note"


def _replace_stat(old: SourceRow, f: FoundFile) -> SourceRow:
    return replace(old, mtime_ns=f.mtime_ns, size=f.size)


def failed_record(source: SourceRow, exc: ApplianceError) -> SourceRow:
    """The record of a file whose conversion failed: written, so the next sync does not retry it unchanged."""
    return replace(source, error_code=exc.code, error=exc.message, ingested_at=time.time())
