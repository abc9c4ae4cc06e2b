"""The sync lock against its own probe: `lock_holder` (status, a followed sync's progress) takes a shared
lock for an instant, and a sync starting in that instant must still start."""
from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from appliance.errors import SyncBusy
from appliance.storage.locking import LOCK_FILE, PROBE_GRACE_S, lock_holder, sync_lock


def hold_shared(db: Path, seconds: float) -> threading.Thread:
    """A probe's shared hold on the lock file, kept for `seconds` (a real probe keeps it for microseconds)."""
    db.mkdir(parents=True, exist_ok=True)
    fd = os.open(db / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)

    def release() -> None:
        time.sleep(seconds)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def test_a_sync_starting_during_a_probe_takes_the_lock(tmp_path: Path) -> None:
    probe = hold_shared(tmp_path, PROBE_GRACE_S / 5)
    with sync_lock(tmp_path):
        assert lock_holder(tmp_path)["pid"] == os.getpid()  # type: ignore[index]
    probe.join()
    assert lock_holder(tmp_path) is None


def test_a_held_lock_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with sync_lock(tmp_path):
        started = time.monotonic()
        with pytest.raises(SyncBusy) as err, sync_lock(tmp_path):
            pass
    assert f"pid {os.getpid()}" in str(err.value)
    assert time.monotonic() - started < PROBE_GRACE_S + 1.0


def test_a_hold_longer_than_a_probe_is_refused(tmp_path: Path) -> None:
    probe = hold_shared(tmp_path, PROBE_GRACE_S * 3)
    with pytest.raises(SyncBusy), sync_lock(tmp_path):
        pass
    probe.join()
