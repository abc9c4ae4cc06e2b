"""The index's small state files: the last sync, the scheduler's record, a running sync's progress.

Each is one JSON file in DB_PATH, replaced atomically and readable by every process
that shares the index (the MCP server's `status`, the scheduler, the CLI). This
module imports nothing heavy, so the scheduler and `status` read them without
loading LanceDB, and neither the service nor the scheduler needs the other to do so.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from appliance.assemble.quoting import label
from appliance.errors import restored, storage_error
from appliance.platform.proc_stat import stat_fields
from appliance.results import SyncRunning
from appliance.storage.locking import lock_holder

LAST_SYNC_FILE = "last_sync.json"
SCHEDULER_FILE = "scheduler.json"
PROGRESS_FILE = "sync_progress.json"
ALIVE_FILE = ".scheduler.alive"
"""Locked (shared) by the scheduler for its whole life; the kernel drops the lock when it dies,
in whatever pid namespace it ran."""
SCHEDULER_START_LIMIT_S = 20.0
"""In the container's stdio mode the entrypoint starts the scheduler when the server says its model
and index are loaded, or after this long at the latest (a client that never lists the tools never
starts the warm-up): a sync process starting beside the server's first seconds competes with its
handshake and first answer for the CPU (two cores here; scripts/bench_image.py's cold start).
`status` gives it as the bound of a pending first sync."""
RUNNING_STATES = ("starting", "idle", "syncing", "waiting", "off")

PUBLISH_EVERY_S = 0.5
"""A running sync rewrites its progress file at most this often (and at every phase change)."""
LOG_EVERY_S = 10.0
"""...and logs one progress line this often (the container's stderr shows it)."""

log = logging.getLogger("appliance.sync")


def read_json(db_path: Path, name: str) -> dict[str, object] | None:
    """The file's JSON object, or None when it is missing, unreadable or not an object."""
    try:
        data = json.loads((db_path / name).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(db_path: Path, name: str, data: object) -> None:
    """Replace DB_PATH/name atomically (a reader sees the old file or the new one); OSError on failure."""
    path = db_path / name
    tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), "utf-8")
    os.replace(tmp, path)


# ---- a running sync's progress ----------------------------------------------------
class SyncProgress:
    """Publishes one sync's progress for every process sharing the index, and forwards it.

    Phases: scanning (walking the roots) → indexing (files converted, chunks embedded
    and written) → finishing (index refresh). A file counts as done when its chunks are
    written, not when it is converted: the model, not conversion, is what a sync waits for.
    `forward` gets (phase, files done, total, path), the CLI's progress bar and the MCP job
    record take it.
    """

    def __init__(self, db_path: Path, started_by: str, *, forward: Callable[[str, int, int, str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.db_path = db_path
        self.forward = forward
        self.clock = clock
        now = clock()
        self.run = SyncRunning(pid=os.getpid(), started_by=started_by, started_at=now, phase="scanning",
                               files_done=0, files_total=0, files_seen=0, files_converted=0, chunks_written=0,
                               chunks_total=None, chunks_total_known=False, chunks_embedded=0, chunks_reused=0,
                               current_path=None, files_per_second=None, chunks_per_second=None, eta_seconds=None,
                               updated_at=now)
        """The record other processes read (its wire form is the progress file)."""
        self._indexing_since: float | None = None
        self._first_write: tuple[float, int] | None = None
        self._last_write: tuple[float, int] = (now, 0)
        """(time, chunks written) when the count first rose above 0, and when it last changed."""
        self._published = 0.0
        self._logged = now
        self._broken = False
        self._publish(force=True)

    def scanning(self, seen: int) -> None:
        self._set(files_seen=seen)
        if self._publish() and self.forward is not None:
            self.forward("scanning", seen, 0, "")

    def indexing(self, done: int, total: int, path: str | None, chunks: int, embedded: int = 0,
                 reused: int = 0, *, converted: int | None = None, cut: int = 0) -> None:
        """`done` of `total` files are stored (their chunks, or their failure, written), `chunks`
        chunks written; `converted` files were converted and cut into `cut` chunks (the chunks
        still waiting for the model are `cut - chunks`). Of the chunks cut, `embedded` went to the
        model and `reused` took a vector the index already held for the same text.

        The ETA divides the chunks still to write by the rate chunks are written at: the model's
        pace is what a sync waits for, and a file's share of it is known once the file is cut
        (before that, the files not yet converted are reckoned at the average of those that are).
        It stays null until two writes give a rate."""
        now = self.clock()
        entering = self._indexing_since is None  # a phase change is published at once, not when the throttle allows
        if self._indexing_since is None:
            self._indexing_since = now
        converted = done if converted is None else max(converted, done)
        elapsed = now - self._indexing_since
        expected = chunks_expected(converted, total, cut)
        if chunks and self._first_write is None:
            self._first_write = (now, chunks)
        if chunks and chunks != self._last_write[1]:
            self._last_write = (now, chunks)
        rate = self._chunk_rate()
        self._set(phase="indexing", files_done=done, files_total=total, files_converted=converted,
                  current_path=path, chunks_written=chunks, chunks_embedded=embedded, chunks_reused=reused,
                  chunks_total=expected, chunks_total_known=converted >= total and expected is not None,
                  files_per_second=round(done / elapsed, 3) if done and elapsed > 0 else None,
                  chunks_per_second=round(rate, 2) if rate else None,
                  eta_seconds=self._eta(done, total, expected, rate, elapsed))
        self._publish(force=entering)  # before the caller's hook, which may take its time
        if self.forward is not None and path is not None:
            self.forward("indexing", done, total, path)

    def _chunk_rate(self) -> float | None:
        """Chunks written per second from the first write to the last: the model's pace once it is
        loaded and busy (the wait for the first conversion and the model's start are left out)."""
        if self._first_write is None or self._last_write[1] <= self._first_write[1]:
            return None
        return (self._last_write[1] - self._first_write[1]) / max(self._last_write[0] - self._first_write[0], 1e-6)

    def _eta(self, done: int, total: int, expected: int | None, rate: float | None, elapsed: float) -> int | None:
        """The chunks still to write at `rate`, less the time since the last write (the model is on
        the next batch); at the rate files were stored when no chunk count is known (a sync --ray);
        None until there is a rate to go by."""
        if expected is not None:
            if rate is None:
                return None
            since = self.clock() - self._last_write[0]
            return max(0, round((expected - self._last_write[1]) / rate - since))
        return round((total - done) * elapsed / done) if done and elapsed > 0 else None

    def finishing(self, chunks: int) -> None:
        self._set(phase="finishing", current_path=None, chunks_written=chunks, eta_seconds=None)
        self._publish(force=True)

    def close(self) -> None:
        """The sync is over: its progress file goes (status then shows the last sync instead)."""
        with contextlib.suppress(OSError):
            (self.db_path / PROGRESS_FILE).unlink(missing_ok=True)

    def _set(self, **fields: object) -> None:
        self.run = self.run.model_copy(update=fields)

    def _publish(self, force: bool = False) -> bool:
        """Write the record when it is due (True), else nothing (False)."""
        now = self.clock()
        if now - self._logged >= LOG_EVERY_S:
            self._logged = now
            log.info("%s", progress_line(self.run, now))
        if not force and now - self._published < PUBLISH_EVERY_S:
            return False
        self._published = now
        if self._broken:
            return True
        self._set(updated_at=now)
        try:
            write_json(self.db_path, PROGRESS_FILE, self.run.wire(tools=True))
        except OSError:
            self._broken = True  # an unwritable index: the sync itself reports that
        return True


def chunks_expected(converted: int, total: int, cut: int) -> int | None:
    """The chunks the whole sync will write: those cut so far, and for the files not yet converted
    the average of the converted ones; None before any file gave a chunk."""
    if not converted or not cut:
        return None
    return cut + round(max(0, total - converted) * cut / converted)


def progress_line(run: SyncRunning, now: float | None = None) -> str:
    """One human line for a running sync's progress record."""
    elapsed = (now or time.time()) - (run.started_at or 0)
    if run.phase == "scanning":
        return f"sync ({run.started_by}): scanning, {run.files_seen or 0:,} files seen, {elapsed:.0f} s"
    if run.phase == "finishing":
        return f"sync ({run.started_by}): finishing, {run.chunks_written or 0:,} chunks written"
    done, total = run.files_done or 0, run.files_total or 0
    written, expected = run.chunks_written or 0, run.chunks_total
    converted = run.files_converted or done
    parts = [f"sync ({run.started_by}): {done:,}/{total:,} files stored"
             + (f" ({converted:,} converted)" if converted > done else ""),
             f"{written:,}" + (f"/{'' if run.chunks_total_known else '~'}{expected:,}" if expected else "")
             + " chunks written" + (f" ({100 * written // expected}%)" if expected else "")]
    if run.chunks_reused:
        parts.append(f"{run.chunks_reused:,} reused without the model")
    if run.chunks_per_second:
        parts.append(f"{run.chunks_per_second:.1f} chunks/s")
    elif run.files_per_second:
        parts.append(f"{run.files_per_second:.2f} files/s")
    if run.eta_seconds is not None:
        eta = int(run.eta_seconds)
        parts.append(f"about {eta // 60} min {eta % 60} s left" if eta >= 60 else f"about {eta} s left")
    if run.current_path:
        parts.append(f"at {label(run.current_path)}")
    return ", ".join(parts)


def running_sync(db_path: Path) -> dict[str, object] | None:
    """The sync holding DB_PATH's lock, with its progress when it publishes any; None when none runs.

    The progress file counts only when the lock holder wrote it: a file left by a killed
    sync, or a holder from an older version that publishes nothing, shows no stale figures.
    """
    holder = lock_holder(db_path)
    if holder is None:
        return None
    progress = read_json(db_path, PROGRESS_FILE)
    if progress is not None and progress.get("pid") == holder.get("pid"):
        return {**progress, **holder}
    return holder


# ---- the last finished sync ---------------------------------------------------------
def read_last_sync(db_path: Path) -> dict[str, object] | None:
    """The last finished sync's report, its texts that name next actions Hints again (errors.restored;
    a record an older version wrote holds plain texts and is shown as written)."""
    return restored(read_json(db_path, LAST_SYNC_FILE))


def save_last_sync(db_path: Path, report: dict[str, object]) -> None:
    """Record a finished sync's report (with `finishedAt`); OSError when the index is not writable."""
    write_json(db_path, LAST_SYNC_FILE, report)


def record_finished_sync(db_path: Path, report: dict[str, object], scope: Path | None) -> None:
    """save_last_sync with the finishing time and the sync's scope; an unwritable index raises its
    named storage error (what a sync and a sync answered from its stamp both report). `report` is
    RunReport.to_dict's stored form (its Hints' templates and actions beside their texts)."""
    try:
        save_last_sync(db_path, report | {"finishedAt": time.time(), "scope": str(scope) if scope else None})
    except OSError as exc:
        raise (storage_error(exc, f"the index at {db_path}", db_path) or exc) from exc


# ---- the scheduler's record -----------------------------------------------------------
def read_scheduler_state(db_path: Path) -> dict[str, object] | None:
    """The scheduler's last recorded state, or None when it never ran here.

    `alive` says whether that scheduler still runs (None: cannot be told from here). A
    record left by one that was killed is shown as `state: stopped`, with the state it
    recorded in `recordedState` and `interrupted: true` when it died during a sync. Its texts that
    name next actions are Hints again (errors.restored; an older version's plain texts stay as written).
    """
    state = restored(read_json(db_path, SCHEDULER_FILE))
    if state is None or state.get("state") not in RUNNING_STATES:
        return state
    alive = _alive(db_path, state)
    state["alive"] = alive
    if alive is False:
        state.update(recordedState=state["state"], state="stopped", nextRunAt=None,
                     interrupted=state["state"] in ("starting", "syncing"))
    return state


def process_marker(pid: int | None = None) -> dict[str, object]:
    """What tells this process from a later one given the same pid: boot, pid namespace, start time."""
    pid = pid or os.getpid()
    return {"host": socket.gethostname(), "bootId": _read("/proc/sys/kernel/random/boot_id"),
            "pidNamespace": _pid_namespace(), "pidStartTicks": _start_ticks(pid)}


def hold_alive_lock(db_path: Path) -> int | None:
    """Take ALIVE_FILE (shared) for the life of this process; None when the index is unwritable."""
    try:
        db_path.mkdir(parents=True, exist_ok=True)
        fd = os.open(db_path / ALIVE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # a reader's probe holds it for microseconds
    except OSError:
        os.close(fd)
        return None
    return fd


def _alive(db_path: Path, state: dict[str, object]) -> bool | None:
    held = _alive_lock_held(db_path)
    if held is not None and state.get("aliveLock"):
        return held  # the lock answers across pid namespaces, and a reused pid cannot fake it
    pid, mine = state.get("pid"), process_marker()
    if not isinstance(pid, int) or state.get("bootId") != mine["bootId"]:
        return False if state.get("bootId") and mine["bootId"] else None  # rebooted, or no record
    if state.get("pidNamespace") != mine["pidNamespace"]:
        return None  # another container's pid means nothing here
    return _start_ticks(pid) is not None and _start_ticks(pid) == state.get("pidStartTicks")


def _alive_lock_held(db_path: Path) -> bool | None:
    """True while a scheduler holds ALIVE_FILE, False when none does, None when there is no such file."""
    try:
        fd = os.open(db_path / ALIVE_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # also drops a lock we got
    return False


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot; None when there is no such process."""
    found = stat_fields(pid, 22)
    return found[0] if found else None


def process_started_at(pid: int) -> float | None:
    """When process `pid` started (epoch seconds, from /proc: boot time plus its start ticks), or None."""
    ticks = _start_ticks(pid)
    boot = next((line.split()[1] for line in (_read("/proc/stat") or "").splitlines() if line.startswith("btime ")),
                None)
    if ticks is None or boot is None:
        return None
    return int(boot) + ticks / os.sysconf("SC_CLK_TCK")
