"""The advisory sync lock in DB_PATH: one sync at a time, released by the kernel on death.

For an index in a bucket the lock file is in this host's state directory, and the bucket's writer
lease (appliance.storage.bucket) holds the other hosts off as well."""
from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from appliance.config import Bucket
from appliance.errors import SyncBusy, storage_error

LOCK_FILE = ".sync.lock"
PROBE_GRACE_S = 0.5
"""How long a sync taking the lock waits out a conflicting hold: `lock_holder` probes with a shared
lock for microseconds, and a sync starting at that instant must not be refused as busy."""


@contextmanager
def sync_lock(db_path: Path, bucket: Bucket | None = None) -> Iterator[None]:
    """Hold the sync lock (and `bucket`'s writer lease), or raise SyncBusy naming the holder (within
    PROBE_GRACE_S).

    A DB_PATH that cannot be written (read-only mount, full disk) is reported by name.
    """
    path = db_path / LOCK_FILE
    try:
        db_path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise (storage_error(exc, f"the index at {db_path}", db_path) or exc) from exc
    try:
        if not _take(fd):
            holder = lock_holder(db_path) or {}
            started = holder.get("startedAt")
            age = time.time() - started if isinstance(started, int | float) else 0.0
            raise SyncBusy(
                f"Another sync is running (pid {holder.get('pid', '?')}, for {age:.0f} s) on {db_path}"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"pid": os.getpid(), "startedAt": time.time()}).encode())
        except OSError as exc:
            fcntl.flock(fd, fcntl.LOCK_UN)
            raise (storage_error(exc, f"the index at {db_path}", db_path) or exc) from exc
        try:
            if bucket is None:
                yield
            else:
                from appliance.storage.bucket import writer_lease  # obstore, only for an index in a bucket

                with writer_lease(bucket, str(db_path)):
                    yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _take(fd: int) -> bool:
    """Take the exclusive lock, waiting out a probe's shared hold; False if a sync holds it."""
    deadline = time.monotonic() + PROBE_GRACE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def lock_holder(db_path: Path) -> dict[str, object] | None:
    """The running sync's {pid, startedAt}, or None when no sync holds the lock."""
    path = db_path / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(path.read_text() or "{}")
            except (OSError, ValueError):
                return {}
            return holder if isinstance(holder, dict) else {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
