"""Background sync jobs for the MCP server: start one in a thread, poll it by id.

A job is an in-memory record owned by one server process; the cross-process
guarantee (one sync per DB_PATH) stays with the advisory lock in locking.py.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from appliance.errors import ApplianceError, NotFound, SyncBusy
from appliance.stopping import Stopped

log = logging.getLogger(__name__)

MAX_FINISHED_JOBS = 50
"""Finished jobs kept for polling; older ones are forgotten first."""

SyncRun = Callable[[Callable[[str, int, int, str], None]], Any]
"""Runs the sync, reporting progress(phase, done, total, path); returns a RunReport."""


@dataclass
class SyncJob:
    job_id: str
    path: str | None
    phase: str = "queued"
    """queued -> scanning -> indexing -> succeeded | failed"""
    files_done: int = 0
    files_total: int = 0
    current_path: str = ""
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    report: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def is_running(self) -> bool:
        return self.finished_at is None

    def to_dict(self) -> dict[str, Any]:
        report = self.report or {}
        return {
            "jobId": self.job_id, "path": self.path, "phase": self.phase,
            "filesDone": self.files_done, "filesTotal": self.files_total, "currentPath": self.current_path or None,
            "startedAt": self.started_at, "finishedAt": self.finished_at,
            "elapsedSeconds": round((self.finished_at or time.time()) - self.started_at, 3),
            "failures": [{"path": f["path"], "reason": f["reason"], "code": f.get("code")}
                         for f in report.get("failed", [])],
            "counts": {k: v for k, v in report.items() if k not in ("failed", "skipped")} or None,
            "error": self.error,
        }


class SyncJobs:
    """At most one running job per registry; finished ones stay pollable for a while."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, SyncJob] = {}

    def start(self, path: str | None, run: SyncRun) -> SyncJob:
        """Start `run` in a daemon thread; SyncBusy if this registry already runs one."""
        with self._lock:
            running = next((j for j in self._jobs.values() if j.is_running), None)
            if running is not None:
                raise SyncBusy(f"Sync job {running.job_id} is still running ({running.files_done}/"
                               f"{running.files_total} files)",
                               hint=f"Poll sync_status with jobId {running.job_id} until it finishes.")
            job = SyncJob(job_id=uuid.uuid4().hex[:12], path=path)
            self._jobs[job.job_id] = job
            self._forget_old()
        thread = threading.Thread(target=self._run, args=(job, run), name=f"sync-{job.job_id}", daemon=True)
        thread.start()
        return job

    def get(self, job_id: str) -> SyncJob:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"No sync job {job_id!r} in this server process",
                           hint="Jobs live as long as the server process; start one with sync_start.")
        return job

    def _run(self, job: SyncJob, run: SyncRun) -> None:
        job.phase = "scanning"

        def progress(phase: str, done: int, total: int, path: str) -> None:
            job.phase, job.files_done, job.files_total, job.current_path = "indexing", done, total, path

        try:
            report = run(progress)
            job.report = report.to_dict()
            job.files_done = job.files_total = max(job.files_total, report.seen)
            job.phase = "succeeded"
        except ApplianceError as exc:
            job.error, job.phase = exc.to_dict(), "failed"
        except Stopped as exc:  # the server is shutting down
            job.error = {"code": "stopped", "message": f"The sync stopped because the server is stopping ({exc})",
                         "hint": "The next sync finishes it."}
            job.phase = "failed"
        except Exception:  # a bug: keep the traceback on stderr, give the poller a stable code
            log.exception("sync job %s crashed", job.job_id)
            job.error = {"code": "internal_error", "message": "The sync stopped on an unexpected error",
                         "hint": "The server log (stderr) has the details."}
            job.phase = "failed"
        finally:
            job.current_path = ""
            job.finished_at = time.time()

    def _forget_old(self) -> None:
        finished = sorted((j for j in self._jobs.values() if not j.is_running), key=lambda j: j.started_at)
        for job in finished[:max(0, len(finished) - MAX_FINISHED_JOBS)]:
            del self._jobs[job.job_id]
