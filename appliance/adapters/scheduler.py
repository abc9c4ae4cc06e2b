"""The sync scheduler: `Appliance.sync()` every SYNC_INTERVAL seconds (0 = off).

Runs as its own process (`minirag scheduler`, a supervisor program in the
container). It shares the sync lock with manual and MCP syncs: when the lock is
busy the round is skipped and logged. What it did is kept in DB_PATH/scheduler.json
(see `write_state`) so `status` can show last run, next run and failures.

At start it syncs at once when the index has never been synced or the last sync is
older than the interval. SIGTERM/SIGINT stop it within a second or two, also during
a sync (see appliance/platform/stopping.py): the conversion workers are killed, the chunks
waiting for the model are abandoned, only the LanceDB write in flight finishes, and
the next sync picks the remainder up.

A scheduler killed outright leaves its last state in scheduler.json; `state.read_scheduler_state`
tells a live scheduler from such a stale record (it holds a lock on
DB_PATH/.scheduler.alive while it lives, and records which process it was).

Every problem is one clear log line on stderr, repeated only when it changes, and
the process keeps running: a misconfigured container never turns into a crash loop.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.config import Environment, Settings, read_environment
from appliance.errors import ApplianceError, Hint, NextAction, SyncBusy, restored, storable
from appliance.platform import stopping
from appliance.platform.stopping import Stopped
from appliance.sync.state import (
    SCHEDULER_FILE,
    hold_alive_lock,
    process_marker,
    read_last_sync,
    read_scheduler_state,
    write_json,
)

if TYPE_CHECKING:
    from appliance.service import Appliance

STATE_SCHEMA = 1
RETRY_AFTER_PROBLEM_S = 60
"""How soon a round is retried after a setup problem (no docs, unwritable index), at most the interval."""

log = logging.getLogger("appliance.adapters.scheduler")


def docs_problem(settings: Settings, index_has_sources: bool) -> str | None:
    """Why a scheduled sync has nothing to do now, or None.

    In the container a root must be a mount point. Otherwise, once the index holds
    files, the sync itself decides root by root what it may delete (a missing, empty
    or mostly emptied root keeps its files: sync.plan.held_roots, the rule every sync
    path shares); before that, a missing or empty root only means nothing to index yet.
    """
    for root in settings.roots:
        if settings.container and not (root.is_dir() and is_mount_point(root)):
            return (f"no documents are mounted at {root}; run the container with "
                    f"-v /path/to/docs:{root}:ro")
    if index_has_sources:
        return None
    for root in settings.roots:
        if not root.is_dir():
            return f"document root {root} does not exist or is not a directory; nothing to sync"
    if all(not any(root.iterdir()) for root in settings.roots):
        return f"{', '.join(str(r) for r in settings.roots)} is empty: nothing to index yet"
    return None


def no_model(model_id: str, models_dir: Path, model: Path) -> Hint:
    """The setup problem of a model not baked (yet): what is missing and how to bake it."""
    return Hint("no baked model {} in {} ({} is missing); bake it with {} or mount a baked models folder",
                model_id, str(models_dir), str(model), NextAction("models bake"))


def is_mount_point(path: Path) -> bool:
    target = str(path.resolve())
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 4 and fields[4].replace("\\040", " ") == target:
                    return True
        return False
    except OSError:
        return os.path.ismount(target)


class _NotRun(Exception):
    """A round's setup problem found while opening the service: logged and retried, not a failed sync."""

    def __init__(self, message: str, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message, self.error = message, error


class Scheduler:
    """One scheduler loop over one DB_PATH."""

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.interval = settings.sync_interval_s
        self.clock = clock
        self.stop_event = threading.Event()
        self.state: dict[str, Any] = {
            "schema": STATE_SCHEMA, "pid": os.getpid(), "intervalSeconds": self.interval,
            "state": "starting", "startedAt": clock(), "lastRunStartedAt": None, "lastRunFinishedAt": None,
            "lastResult": None, "lastError": None, "lastReport": None, "nextRunAt": None,
            "runs": 0, "failures": 0, "skips": 0, "consecutiveFailures": 0, "problem": None,
            **process_marker(), "aliveLock": False,
        }
        old = read_scheduler_state(settings.db_path) or {}
        for key in ("lastRunStartedAt", "lastRunFinishedAt", "lastResult", "lastError", "lastReport"):
            self.state[key] = old.get(key)
        self._last_logged: str | None = None
        self._state_write_failed = False
        self._child: subprocess.Popen[bytes] | None = None

    # ---- the loop ------------------------------------------------------------
    def run(self) -> int:
        alive_fd = hold_alive_lock(self.settings.db_path)  # released by the kernel when we die
        self.state["aliveLock"] = alive_fd is not None
        try:
            return self._loop()
        finally:
            if alive_fd is not None:
                os.close(alive_fd)

    def _loop(self) -> int:
        if self.interval <= 0:
            self._update(state="off", nextRunAt=None)
            self._say("SYNC_INTERVAL=0: scheduled sync is off (manual `minirag sync` and MCP sync_start still work)")
            self.stop_event.wait()
            self._update(state="stopped")
            return 0
        next_at = self._first_run_at()
        self._update(state="idle", nextRunAt=next_at)
        log.info("scheduled sync every %d s; next at %s", self.interval, _clock_str(next_at))
        while not self.stop_event.is_set():
            delay = next_at - self.clock()
            if delay > 0 and self.stop_event.wait(delay):
                break
            problem = self.precheck()
            if problem:
                next_at = self._problem(problem, self.clock() + min(self.interval, RETRY_AFTER_PROBLEM_S))
            else:
                next_at = self.round_in_child()
            self._update(nextRunAt=next_at)
        self._update(state="stopped", nextRunAt=None)
        log.info("scheduler stopped")
        return 0

    def _first_run_at(self) -> float:
        """Now when the index is empty, was never synced whole or that sync is stale; else one
        interval after the last finished sync of every root."""
        return first_run_at(self.settings.db_path, self.interval, self.clock())

    def round(self) -> float:
        """One scheduled sync (or a logged skip); returns when the next one is due. It runs as
        appliance.sync.runner runs the scheduler's: a stamp may answer it without opening the index."""
        from appliance.sync.runner import SyncRequest, run

        now = self.clock()
        retry = now + min(self.interval, RETRY_AFTER_PROBLEM_S)
        unwritable = _unwritable(self.settings.db_path)
        if unwritable:
            return self._problem(unwritable, retry)
        try:
            report = run(self.settings, SyncRequest(), "scheduler", lambda: self._open(now),
                         progress=self._check_stop).report
            self.state.update(lastRunStartedAt=now, problem=None)  # a stamp's answer too (no _open)
        except _NotRun as exc:
            return self._problem(exc.message, retry, exc.error)
        except Stopped:
            self._record("abandoned", None, "stopped during a sync; the next sync finishes the rest")
            log.info("sync stopped (what was written stays); the next sync picks up the rest")
            return now + self.interval
        except SyncBusy as exc:
            self.state["skips"] += 1
            self._update(state="idle", lastResult="skipped_busy")
            log.info("scheduled sync skipped: %s", exc.message)
            return now + self.interval
        except ApplianceError as exc:
            self._record("failed", exc.to_dict(), exc.message)
            return now + self.interval
        except OSError as exc:
            return self._problem(_os_message(self.settings.db_path, exc), retry)
        except Exception as exc:  # keep scheduling; the traceback goes to the log once
            log.exception("scheduled sync crashed")
            self._record("failed", {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}"}, None)
            return now + self.interval
        data = report.to_dict()
        summary = {k: data[k] for k in ("seen", "added", "updated", "unchanged", "refreshed", "deleted",
                                        "skippedCount", "failedCount", "chunks", "seconds")}
        result = "ok" if report.ok else "partial"
        held = Hint.joined("; ", [h.reason for h in report.held_roots])
        self.state["runs"] += 1
        self.state["consecutiveFailures"] = 0
        self._update(state="idle", lastResult=result, lastReport=summary, lastRunFinishedAt=self.clock(),
                     lastError={"code": "root_held", "message": held} if held else None)
        if held:  # once, like a setup problem, until it changes
            self._say(f"scheduled sync kept files instead of deleting them: {held}", warn=True)
        else:
            self._last_logged = None
        changed = report.added + report.updated + report.deleted + report.failed_count
        (log.info if changed else log.debug)(
            "scheduled sync: seen %d, added %d, updated %d, deleted %d, failed %d; %d chunks in %.1f s",
            report.seen, report.added, report.updated, report.deleted, report.failed_count,
            report.chunks, report.seconds)
        return now + self.interval

    def _open(self, started: float) -> Appliance:
        """The service for a sync here, once the model and the documents are there (else _NotRun)."""
        try:
            from appliance.service import Appliance

            app = Appliance(self.settings)
            model = self.settings.models_dir / app.spec.dir_name / "model.onnx"
            if not model.is_file():
                raise _NotRun(no_model(app.spec.id, self.settings.models_dir, model))
            problem = docs_problem(self.settings, bool(app.index.registry.source_rows()))
        except ApplianceError as exc:
            raise _NotRun(exc.with_hint(), exc.to_dict()) from exc
        except OSError as exc:
            raise _NotRun(_os_message(self.settings.db_path, exc)) from exc
        except _NotRun:
            raise
        except Exception as exc:  # e.g. a damaged index LanceDB cannot open
            raise _NotRun(f"cannot open the index at {self.settings.db_path}: {type(exc).__name__}: {exc}") from exc
        if problem:
            raise _NotRun(problem)
        self._update(state="syncing", lastRunStartedAt=started, problem=None)
        return app

    def precheck(self) -> str | None:
        """The setup problems found without loading LanceDB or the model (cheap enough for every round)."""
        from appliance.models.manifest import load_spec

        unwritable = _unwritable(self.settings.db_path)
        if unwritable:
            return unwritable
        try:
            spec = load_spec(self.settings.model_name, self.settings.models_dir, self.settings.models_manifest)
        except ApplianceError as exc:
            return exc.with_hint()
        model = self.settings.models_dir / spec.dir_name / "model.onnx"
        if not model.is_file():
            return no_model(spec.id, self.settings.models_dir, model)
        try:
            has_tables = self.settings.bucket is not None or any(
                p.suffix == ".lance" for p in self.settings.db_path.iterdir())
        except OSError:
            has_tables = False
        return docs_problem(self.settings, has_tables)

    def round_in_child(self) -> float:
        """One round in a fresh process, so the model and LanceDB leave memory when it ends.

        The child gets the state as JSON and the last logged problem on argv, and prints the new state
        as its last stdout line; SIGTERM is forwarded to it (it stops within a second or two, see
        appliance/platform/stopping.py). It reads the same environment as this process.
        """
        now = self.clock()
        try:
            self._child = subprocess.Popen([sys.executable, "-m", "appliance.adapters.scheduler", "--round",
                                            json.dumps(storable(self.state)), self._last_logged or ""],
                                           stdout=subprocess.PIPE)
            if self.stop_event.is_set():  # a stop that came while the child was starting found no child to signal
                self._child.send_signal(signal.SIGTERM)
            out, _ = self._child.communicate()
            code = self._child.returncode
        finally:
            self._child = None
        try:
            result = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
            self.state.update(restored(result["state"]), pid=os.getpid(), **process_marker(),
                              aliveLock=self.state["aliveLock"])
            self._last_logged = result["lastLogged"]
            return float(result["nextRunAt"])
        except (ValueError, KeyError, IndexError, TypeError):
            if self.stop_event.is_set():
                return now + self.interval
            self._record("failed", {"code": "internal_error", "message": f"the sync process exited with {code}"},
                         None)
            return now + self.interval

    def _check_stop(self, phase: str, done: int, total: int, path: str) -> None:
        if self.stop_event.is_set():
            raise Stopped()

    def stop(self, *_: object) -> None:
        self.stop_event.set()
        stopping.request("the scheduler is stopping")  # a sync in this process leaves promptly
        child = getattr(self, "_child", None)
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    # ---- bookkeeping -----------------------------------------------------------
    def _problem(self, message: str, retry_at: float, error: dict[str, Any] | None = None) -> float:
        self.state["skips"] += 1
        self._update(state="waiting", lastResult="skipped_problem", problem=message,
                     lastError=error or {"code": "setup_problem", "message": message})
        self._say(f"scheduled sync not run: {message}", warn=True)
        return retry_at

    def _record(self, result: str, error: dict[str, Any] | None, message: str | None) -> None:
        self.state["failures"] += 1 if result == "failed" else 0
        self.state["consecutiveFailures"] += 1 if result == "failed" else 0
        self._update(state="idle", lastResult=result, lastError=error, lastRunFinishedAt=self.clock())
        if result == "failed":
            self._say(f"scheduled sync failed: {message or (error or {}).get('message')}", warn=True)

    def _say(self, message: str, *, warn: bool = False) -> None:
        """Log a problem once; again only when it changes."""
        if message != self._last_logged:
            (log.warning if warn else log.info)(message)
            self._last_logged = message

    def _update(self, **values: Any) -> None:
        self.state.update(values, updatedAt=self.clock())
        self.write_state()

    def write_state(self) -> None:
        """DB_PATH/scheduler.json, replaced atomically; an unwritable index is logged once."""
        try:
            self.settings.db_path.mkdir(parents=True, exist_ok=True)
            write_json(self.settings.db_path, SCHEDULER_FILE, storable(self.state))
            self._state_write_failed = False
        except OSError as exc:
            if not self._state_write_failed and not _unwritable(self.settings.db_path):  # else round() says it
                log.warning("cannot record the scheduler state: %s", _os_message(self.settings.db_path, exc))
                self._state_write_failed = True


def first_run_at(db_path: Path, interval: float, now: float) -> float:
    """When a scheduler starting now syncs first (read without LanceDB: the last sync's record).

    A sync of one path (`minirag sync /docs/a`, an MCP sync_start with a path) or one that left
    nothing indexed does not count: a container restarted on such an index syncs at once."""
    last = read_last_sync(db_path) or {}
    at = last.get("finishedAt")
    finished = float(at) if isinstance(at, int | float) and last.get("scope") is None else 0.0
    if not any(last.get(key) for key in ("added", "updated", "unchanged", "refreshed")):
        finished = 0.0  # nothing indexed by it: the index is empty (or held nothing of the roots)
    return now if now - finished >= interval else finished + interval


def _unwritable(db_path: Path) -> str | None:
    """Why DB_PATH cannot be written by this user, or None."""
    probe = db_path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if os.access(probe, os.W_OK | os.X_OK):
        return None
    return (f"the index directory {db_path} is not writable by uid {os.getuid()}; "
            f"mount a writable volume there (e.g. -v minirag-index:{db_path})")


def _os_message(db_path: Path, exc: OSError) -> str:
    where = exc.filename or db_path
    reason = exc.strerror or str(exc)
    if isinstance(exc, PermissionError) or exc.errno in (13, 30):
        return (f"the index directory {db_path} is not writable by uid {os.getuid()} ({where}: {reason}); "
                f"mount a writable volume there (e.g. -v minirag-index:{db_path})")
    return f"{where}: {reason}"


def _clock_str(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def child_round(state_json: str, last_logged: str) -> int:
    """`python -m appliance.adapters.scheduler --round STATE LAST_LOGGED`: one round at low CPU priority;
    prints the new state.

    The round process's composition root: it reads the environment (the scheduler's, inherited) itself."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s scheduler: %(message)s",
                        handlers=[logging.StreamHandler()])
    with contextlib.suppress(OSError):
        os.nice(10)  # indexing yields the CPU to interactive queries
    scheduler = Scheduler(read_environment().settings())
    scheduler.state.update(restored(json.loads(state_json)))  # pid and marker stay the scheduler's (the alive lock)
    scheduler._last_logged = last_logged or None
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, scheduler.stop)
    next_at = scheduler.round()
    sys.stdout.write("\n" + json.dumps({"state": storable(scheduler.state), "lastLogged": scheduler._last_logged,
                                        "nextRunAt": next_at}) + "\n")
    if stopping.requested():
        stopping.hard_exit(0)  # nothing left to wait for: the write in flight is done, the model's batch is dropped
    return 0


def main(environment: Environment | None = None) -> int:
    """Entry for `minirag scheduler` (the CLI passes the environment it read) and
    `python -m appliance.adapters.scheduler` (reads it here): logs to stderr, stops on SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s scheduler: %(message)s",
                        handlers=[logging.StreamHandler()])
    try:
        settings = (environment if environment is not None else read_environment()).settings()
    except ApplianceError as exc:
        # The configuration cannot change while this process lives: say so once and
        # idle until stopped, so supervisor does not restart us in a loop.
        log.error("scheduled sync is off: %s", exc.with_hint())
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
        return 0
    scheduler = Scheduler(settings)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, scheduler.stop)
    return scheduler.run()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--round":
        sys.exit(child_round(sys.argv[2], sys.argv[3]))
    sys.exit(main())
