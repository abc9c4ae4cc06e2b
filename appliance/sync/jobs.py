"""Background jobs for the MCP server: start one in a thread, poll it by id with sync_status.

Two kinds of work run as jobs: a sync (`sync_start`) and an ingest whose content is
too large to embed within one tool call (`ingest_data` / `ingest_url` above
INGEST_FOREGROUND_MAX_BYTES). A job is an in-memory record owned by one server
process; the cross-process guarantee (one sync per DB_PATH) stays with the advisory
lock in locking.py.

At most one sync job runs at a time. Ingest jobs run one at a time in arrival
order (the rest wait in phase "queued", holding their content in memory), at most
MAX_PENDING_INGESTS of them; a sync and an ingest job may run side by side, as a
sync and a foreground ingest always could.

Every job can be cancelled (`cancel`, the MCP tool sync_cancel): it runs inside a
stopping.Scope, so a cancel stops it the way a process stop stops a sync - its
conversion worker killed, its embedding abandoned between batches, only a write
already in flight finished - and it ends in phase "cancelled".
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, cast

from appliance.errors import ApplianceError, NotFound, SyncBusy
from appliance.platform.stopping import Cancelled, Scope, Stopped
from appliance.results import ErrorInfo, JobPhase, RunReport, SyncJob

log = logging.getLogger(__name__)

MAX_FINISHED_JOBS = 50
"""Finished jobs kept for polling; older ones are forgotten first."""
MAX_PENDING_INGESTS = 4
"""Ingest jobs running or queued at once; each holds its content (up to MAX_FILE_SIZE) in memory."""

JobKind = Literal["sync", "ingest_data", "ingest_url"]


SyncRun = Callable[[Callable[[str, int, int, str], None]], RunReport]
"""Runs the work, reporting progress(phase, done, total, path)."""


@dataclass
class _Job:
    """A job as its thread updates it; `record` is what a poller sees."""

    job_id: str
    path: str | None
    kind: JobKind = "sync"
    source: str | None = None
    """The source id (or URL) an ingest job writes; None for a sync."""
    phase: JobPhase = "queued"
    files_done: int = 0
    files_total: int = 0
    current_path: str = ""
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    report: RunReport | None = None
    error: ErrorInfo | None = None
    scope: Scope = field(default_factory=Scope)

    @property
    def is_running(self) -> bool:
        return self.finished_at is None

    def record(self) -> SyncJob:
        report = self.report
        counts = ({k: v for k, v in report.to_dict().items() if k not in ("failed", "skipped", "heldRoots")}
                  if report else None)
        return SyncJob(job_id=self.job_id, kind=self.kind, path=self.path, source=self.source, phase=self.phase,
                       files_done=self.files_done, files_total=self.files_total,
                       current_path=self.current_path or None, started_at=self.started_at,
                       finished_at=self.finished_at,
                       elapsed_seconds=round((self.finished_at or time.time()) - self.started_at, 3),
                       failures=list(report.failed) if report else [], counts=counts, error=self.error,
                       held_roots=list(report.held_roots) if report else [])


class SyncJobs:
    """The jobs of one registry (one Appliance); finished ones stay pollable for a while."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turn = threading.Condition()
        self._line: list[str] = []
        """Ingest job ids in arrival order; the first one embeds, the others wait in phase 'queued'."""
        self._jobs: dict[str, _Job] = {}

    def start(self, path: str | None, run: SyncRun) -> SyncJob:
        """Start a sync `run` in a daemon thread; SyncBusy if this registry already runs one."""
        with self._lock:
            running = next((j for j in self._jobs.values() if j.is_running and j.kind == "sync"), None)
            if running is not None:
                raise SyncBusy(f"Sync job {running.job_id} is still running ({running.files_done}/"
                               f"{running.files_total} files)",
                               hint=f"Poll sync_status with jobId {running.job_id} until it finishes.")
            job = self._add(_Job(job_id=uuid.uuid4().hex[:12], path=path))
        self._spawn(job, run)
        return job.record()

    def start_ingest(self, kind: JobKind, source: str, run: SyncRun) -> SyncJob:
        """Queue an ingest `run` (one document) behind the ingest jobs before it; SyncBusy when
        MAX_PENDING_INGESTS are already running or waiting."""
        with self._lock:
            pending = [j for j in self._jobs.values() if j.is_running and j.kind != "sync"]
            if len(pending) >= MAX_PENDING_INGESTS:
                raise SyncBusy(f"{len(pending)} ingest jobs are already running or queued in this server",
                               hint=f"Poll sync_status with jobId {pending[0].job_id}; submit more once one finishes.")
            job = self._add(_Job(job_id=uuid.uuid4().hex[:12], path=None, kind=kind, source=source, files_total=1))
            with self._turn:
                self._line.append(job.job_id)
        self._spawn(job, run)
        return job.record()

    def get(self, job_id: str) -> SyncJob:
        return self._job(job_id).record()

    def cancel(self, job_id: str) -> SyncJob:
        """Ask a running or queued job to stop; its record (it ends in phase "cancelled" soon after)."""
        job = self._job(job_id)
        if job.is_running:
            job.scope.cancel(f"job {job_id} was cancelled on request")
            with self._turn:  # a queued ingest leaves the line at once
                self._turn.notify_all()
        return job.record()

    def cancel_source(self, source: str) -> list[str]:
        """Cancel the ingest jobs running or queued for `source` (its deletion overrides them); their ids."""
        with self._lock:
            ids = [j.job_id for j in self._jobs.values() if j.is_running and j.kind != "sync" and j.source == source]
        for job_id in ids:
            self.cancel(job_id)
        return ids

    def wait_finished(self, job_ids: list[str], timeout_s: float) -> bool:
        """Wait until those jobs have ended; False when `timeout_s` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            jobs = [self._jobs[i] for i in job_ids if i in self._jobs]
        while any(j.is_running for j in jobs):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _job(self, job_id: str) -> _Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"No job {job_id!r} in this server process",
                           hint="Jobs live as long as the server process; sync_start and a large ingest_data "
                                "or ingest_url start one.")
        return job

    def recent(self, limit: int = 10) -> list[SyncJob]:
        """The newest jobs first."""
        with self._lock:
            jobs = sorted(self._jobs.values(), key=lambda j: j.started_at, reverse=True)
        return [job.record() for job in jobs[:limit]]

    def _add(self, job: _Job) -> _Job:
        self._jobs[job.job_id] = job
        self._forget_old()
        return job

    def _spawn(self, job: _Job, run: SyncRun) -> None:
        thread = threading.Thread(target=self._run, args=(job, run), name=f"{job.kind}-{job.job_id}", daemon=True)
        thread.start()

    def _run(self, job: _Job, run: SyncRun) -> None:
        in_line = job.kind != "sync"
        if in_line:
            with self._turn:
                self._turn.wait_for(lambda: self._line[0] == job.job_id or job.scope.cancelled)
        job.phase = "scanning" if job.kind == "sync" else "indexing"
        job.current_path = job.source or ""

        def progress(phase: str, done: int, total: int, path: str) -> None:
            job.phase, job.files_done, job.files_total, job.current_path = cast(JobPhase, phase), done, total, path

        phase: JobPhase = "failed"
        try:
            with job.scope.active():
                job.scope.check()
                report = run(progress)
            job.report = report
            job.files_done = job.files_total = max(job.files_total, report.seen)
            phase = "succeeded"
        except ApplianceError as exc:
            job.error = ErrorInfo.of(exc)
        except Cancelled as exc:
            job.error = ErrorInfo(code="cancelled", message=f"The {job.kind} job stopped: {exc}",
                                  hint="Nothing of it was written but what a write already in flight held; "
                                       "start it again to finish it.")
            phase = "cancelled"
        except Stopped as exc:  # the server is shutting down
            job.error = ErrorInfo(code="stopped", message=f"The sync stopped because the server is stopping ({exc})",
                                  hint="The next sync finishes it.")
        except Exception:  # a bug: keep the traceback on stderr, give the poller a stable code
            log.exception("%s job %s crashed", job.kind, job.job_id)
            job.error = ErrorInfo(code="internal_error",
                                  message=f"The {job.kind} job stopped on an unexpected error",
                                  hint="The server log (stderr) has the details.")
        finally:
            job.current_path = ""
            job.finished_at = time.time()
            job.phase = phase  # last: a poller that sees a final phase sees a finished job (a new sync may start)
            if in_line:
                with self._turn:
                    self._line.remove(job.job_id)
                    self._turn.notify_all()

    def _forget_old(self) -> None:
        finished = sorted((j for j in self._jobs.values() if not j.is_running), key=lambda j: j.started_at)
        for job in finished[:max(0, len(finished) - MAX_FINISHED_JOBS)]:
            del self._jobs[job.job_id]
