"""The one service layer: every operation the CLI and the MCP server offer.

Adapters build `Settings` once, construct `Appliance(settings)`, call a method
and render its result; they never rank, resolve paths or validate themselves.
`Appliance` is the facade: each operation lives in the module of its job
(sync.indexing, search.hybrid, assemble.reading, health; sync.plan decides what a sync does),
and the background jobs of the MCP server are started here.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from appliance import health
from appliance.assemble import reading
from appliance.assemble.paging import READ_PAGE_CHARS
from appliance.assemble.passages import SectionsMode
from appliance.core import Resources
from appliance.errors import ApplianceError, NotFound
from appliance.results import (
    Deleted,
    Document,
    FileList,
    GrepResults,
    Neighbors,
    RootList,
    RunReport,
    SearchMarkdown,
    SearchResults,
    Status,
    SyncActivity,
    SyncJob,
    SyncRunning,
)
from appliance.search import hybrid as searching
from appliance.storage.locking import lock_holder
from appliance.sync import indexing
from appliance.sync.indexing import Indexer, Progress
from appliance.sync.rounds import default_indexer
from appliance.sync.state import read_last_sync, running_sync

if TYPE_CHECKING:
    from collections.abc import Sequence

    from appliance.config import Settings
    from appliance.embed import Embedder
    from appliance.models.manifest import ModelSpec
    from appliance.storage.index import Index
    from appliance.sync.jobs import SyncJobs

__all__ = ["Appliance", "Progress", "RunReport"]

Answered = TypeVar("Answered", SearchResults, SearchMarkdown)
"""A search answer that can say why it has no hits (its `empty_index`)."""

CANCEL_WAIT_S = 30.0
"""How long a deletion waits for the ingest jobs it cancelled to stop (a batch of the model in flight)."""


class Appliance:
    """Index, search and read documents under the configured roots.

    It holds its `Resources` (settings, model, index, path checks) rather than being them, so this
    facade shows adapters the operations alone; what else they need is under `resources`."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None) -> None:
        self.resources = Resources(settings, embedder=embedder)

    @property
    def settings(self) -> Settings:
        return self.resources.settings

    @property
    def spec(self) -> ModelSpec:
        return self.resources.spec

    @property
    def index(self) -> Index:
        return self.resources.index

    # ---- writing -------------------------------------------------------------
    def ingest(self, paths: Sequence[str | Path], *, require_absolute: bool = False,
               progress: Progress | None = None) -> RunReport:
        """Index the named files and everything under the named directories, replacing old content."""
        return indexing.ingest(self.resources, paths, require_absolute=require_absolute, progress=progress)

    def sync(self, path: str | Path | None = None, *, full: bool = False, clean: bool = False,
             discard_unrecoverable: bool = False, forget_roots: bool = False, allow_deletions: bool = False,
             progress: Progress | None = None, origin: str = "cli", indexer: Indexer | None = None) -> RunReport:
        """Make the index equal to the files on disk (under `path`, when given), here, with `indexer`
        (default: this machine's, in rounds of child processes for many files: sync.rounds); a root that
        looks unmounted keeps its files unless `allow_deletions` (indexing.sync). Adapters go through
        appliance.sync.runner, which picks how a sync runs."""
        return indexing.sync(self.resources, path, full=full, clean=clean, discard_unrecoverable=discard_unrecoverable,
                             forget_roots=forget_roots, allow_deletions=allow_deletions, progress=progress,
                             origin=origin, indexer=indexer or default_indexer(self.settings))

    def ingest_data(self, source_id: str, content: str, fmt: str = "markdown", *,
                    title: str | None = None) -> RunReport:
        """Index content the caller holds under a source id of its choosing."""
        return indexing.ingest_data(self.resources, source_id, content, fmt, title=title)

    def ingest_url(self, url: str, *, source_id: str | None = None) -> RunReport:
        """Fetch one http(s) URL (opt-in: ALLOW_URL_INGEST) and index it under the URL or `source_id`."""
        return indexing.ingest_url(self.resources, url, source_id=source_id)

    def delete(self, target: str, is_source: bool = False, *, require_absolute: bool = False) -> Deleted:
        """Remove a file, data item or URL item from the index (never from disk). An ingest job of this
        process still writing that source is cancelled first: the deletion is the later wish."""
        source_id = self.resources.source_id_for(target, is_source, require_absolute=require_absolute)
        cancelled = self._jobs().cancel_source(source_id) if "_sync_jobs" in self.__dict__ else []
        if cancelled:  # a write already in flight lands before the deletion, not after it
            self._jobs().wait_finished(cancelled, CANCEL_WAIT_S)
        try:
            return indexing.delete(self.resources, target, is_source, require_absolute=require_absolute)
        except NotFound:
            if not cancelled:
                raise
            return Deleted(source=source_id, chunks_removed=0)

    # ---- reading ---------------------------------------------------------------
    def search(self, query: str, *, top_k: int = 10, scope: str | None = None,
               doc_class: str | None = None, sections: SectionsMode = "excerpt",
               explain: bool = False) -> SearchResults:
        """Hybrid search: vector and BM25 in parallel, fused by normalised scores (search.fusion.fuse); `sections`:
        each hit's section around the hits ("excerpt"), whole ("full") or left out ("none"); `explain` adds
        each hit's rank on each side and the query terms it matched."""
        found = searching.search(self.resources, query, top_k=top_k, scope=scope, doc_class=doc_class,
                                 sections=sections, explain=explain)
        return self._said_why_empty(found, len(found.results))

    def gather(self, query: str, *, top_k: int = 10, scope: str | None = None, doc_class: str | None = None,
               context_lines: int = 3) -> SearchMarkdown:
        """`search`'s answer as one Markdown block (query.gather): numbered hits with their citations and, for text
        files, `context_lines` lines of the file around each passage."""
        gathered = searching.gather(self.resources, query, top_k=top_k, scope=scope, doc_class=doc_class,
                                    context_lines=context_lines)
        return self._said_why_empty(gathered, gathered.result_count)

    def _said_why_empty(self, answer: Answered, hits: int) -> Answered:
        """`answer` with `empty_index` set when it has no hits because the index holds nothing yet (health.unfilled);
        asked only of an answer without hits."""
        why = None if hits else health.unfilled(self.resources)
        return answer if why is None else answer.model_copy(update={"empty_index": why})

    def read(self, target: str, is_source: bool = False, *, require_absolute: bool = False,
             offset: int = 0, max_chars: int | None = None, revision: str | None = None,
             start_line: int | None = None, end_line: int | None = None,
             page_start: int | None = None, page_end: int | None = None) -> Document:
        """A document rebuilt from its chunks (no repeated breadcrumbs or headers), whole or one page."""
        return reading.read(self.resources, target, is_source, require_absolute=require_absolute, offset=offset,
                            max_chars=max_chars, revision=revision, start_line=start_line, end_line=end_line,
                            page_start=page_start, page_end=page_end)

    def read_neighbors(self, target: str, is_source: bool, chunk_index: int, *, before: int = 2, after: int = 2,
                       require_absolute: bool = False, max_chars: int = READ_PAGE_CHARS) -> Neighbors:
        """The chunks around one hit, in document order, within `max_chars` of text."""
        return reading.read_neighbors(self.resources, target, is_source, chunk_index, before=before, after=after,
                                      require_absolute=require_absolute, max_chars=max_chars)

    def list_files(self, *, scope: str | None = None, include_ignored: bool = False, require_absolute: bool = False,
                   limit: int | None = None, cursor: str | None = None) -> FileList:
        """Every file under the roots with its state, then the indexed data and URL sources, in pages."""
        return reading.list_files(self.resources, scope=scope, include_ignored=include_ignored,
                                  require_absolute=require_absolute, limit=limit, cursor=cursor)

    def status(self) -> Status:
        """Configuration and index health; never raises for a broken index."""
        return health.status(self.resources)

    # ---- exact match and background sync (the MCP server's grep / sync_start / sync_status) ----
    def grep(self, pattern: str, *, regex: bool = False, case_sensitive: bool = False, scope: str | None = None,
             root: str | None = None, file_glob: str | None = None, max_results: int = 100,
             require_absolute: bool = False) -> GrepResults:
        """Matching lines in the indexed text of every indexed document: files of every format (PDF, Office, EPUB, OCRed
        scans, text), ingest_data items and fetched pages."""
        return reading.grep(self.resources, pattern, regex=regex, case_sensitive=case_sensitive, scope=scope, root=root,
                            file_glob=file_glob, max_results=max_results, require_absolute=require_absolute)

    def list_roots(self) -> RootList:
        """The configured roots by name and path, with their indexed and failed file counts, and the counts of
        ingest_data and URL items (which belong to no root)."""
        return health.list_roots(self.resources)

    def warm_up(self) -> None:
        """Load the model and the index's search structures now, so the first real query is not cold."""
        self.resources.embedder.load()
        # Nothing indexed yet, or an index built differently: the real query reports it.
        with contextlib.suppress(ApplianceError):
            self.search("warm up", top_k=1)

    def sync_start(self, path: str | None = None, *, require_absolute: bool = False,
                   allow_deletions: bool = False) -> SyncJob:
        """Start a sync of `path` (of every root without one) in a background thread and return the job;
        SyncBusy while a sync holds the lock. It runs as appliance.sync.runner runs it for MCP: a stamp
        may answer a plain one, the rest runs here."""
        from appliance.errors import SyncBusy
        from appliance.sync.runner import SyncRequest, run

        if path is not None:
            self.resources.resolve(path, require_absolute=require_absolute)
        holder = lock_holder(self.settings.db_path)
        if holder is not None:
            raise SyncBusy(f"Another sync is running (pid {holder.get('pid', '?')}) on {self.settings.db_path}")
        request = SyncRequest(path, allow_deletions=allow_deletions)
        return self._jobs().start(path, lambda progress: run(self.settings, request, "mcp", lambda: self,
                                                             progress=progress).report)

    def sync_status(self, job_id: str | None = None) -> SyncJob | SyncActivity:
        """A job (a sync, or an ingest too large for the foreground) started in this process; NotFound for an
        unknown id.

        Without a job id: the sync running now on this index, whoever started it (the
        scheduler, another client, `minirag sync`), the last finished sync, and this
        process's recent jobs."""
        db_path = self.settings.db_path
        if job_id is not None:
            job = self._jobs().get(job_id)
            running = running_sync(db_path) if job.kind == "sync" and job.finished_at is None else None
            if running is not None and running.get("pid") == os.getpid() and running.get("startedBy") == "mcp":
                return job.model_copy(update={"progress": SyncRunning.model_validate(running)})  # as status shows it
            return job
        running = running_sync(db_path)
        return SyncActivity(running=SyncRunning.model_validate(running) if running else None,
                            last_sync=read_last_sync(db_path),
                            jobs=list(self._jobs().recent()))

    def cancel_job(self, job_id: str) -> SyncJob:
        """Stop a job of this process (a sync, a large ingest); NotFound for an unknown id. Its record
        says phase "cancelled" once it has stopped (sync_status)."""
        return self._jobs().cancel(job_id)

    def _jobs(self) -> SyncJobs:
        from appliance.sync.jobs import SyncJobs

        jobs: SyncJobs = self.__dict__.setdefault("_sync_jobs", SyncJobs())
        return jobs

    # ---- ingests bounded in time (the MCP server's ingest_data / ingest_url) ----
    def ingest_data_bounded(self, source_id: str, content: str, fmt: str = "markdown", *,
                            title: str | None = None) -> RunReport | SyncJob:
        """`ingest_data`, answered within seconds: content above INGEST_FOREGROUND_MAX_BYTES is
        embedded by a background job and the job record (poll it with sync_status) is returned.
        Bad arguments and content above MAX_FILE_SIZE are refused before any job starts."""
        key = indexing.checked_data(self.resources, source_id, content, fmt)
        if indexing.utf8_size(content) <= self.settings.ingest_foreground_max_bytes:
            return self.ingest_data(key, content, fmt, title=title)
        return self._jobs().start_ingest("ingest_data", key, lambda _progress: self.ingest_data(
            key, content, fmt, title=title))

    def ingest_url_bounded(self, url: str, *, source_id: str | None = None) -> RunReport | SyncJob:
        """`ingest_url`, answered within seconds plus the download: the page is fetched in the
        foreground (the fetcher's timeout and size cap bound it, and refusals answer at once);
        a page of more than INGEST_FOREGROUND_MAX_BYTES as downloaded is converted (in a worker,
        like every page) and embedded by a job."""
        key, page = indexing.fetch_page(self.resources, url, source_id)
        if len(page.body) <= self.settings.ingest_foreground_max_bytes:
            return indexing.ingest_fetched(self.resources, key, indexing.convert_page(self.resources, page))
        return self._jobs().start_ingest("ingest_url", key, lambda _progress: indexing.ingest_fetched(
            self.resources, key, indexing.convert_page(self.resources, page)))
