"""The index's state files: a running sync's progress as other processes read it."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from appliance.results import SyncRunning
from appliance.storage.locking import sync_lock
from appliance.sync.state import (
    LOG_EVERY_S,
    PROGRESS_FILE,
    SyncProgress,
    progress_line,
    read_json,
    read_last_sync,
    running_sync,
    save_last_sync,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_progress_is_published_throttled_and_readable_only_while_its_sync_holds_the_lock(tmp_path: Path) -> None:
    clock = Clock()
    forwarded: list[tuple[str, int, int, str]] = []
    with sync_lock(tmp_path):
        progress = SyncProgress(tmp_path, "scheduler", forward=lambda *a: forwarded.append(a), clock=clock)
        first = read_json(tmp_path, PROGRESS_FILE)
        assert first["phase"] == "scanning" and first["pid"] == os.getpid() and first["startedBy"] == "scheduler"
        clock.now += 0.1
        progress.indexing(1, 10, "/docs/a.pdf", 4)
        assert read_json(tmp_path, PROGRESS_FILE)["phase"] == "indexing"  # a new phase is published at once
        clock.now += 0.1
        progress.indexing(2, 10, "/docs/b.pdf", 8)
        assert read_json(tmp_path, PROGRESS_FILE)["filesDone"] == 1  # within the publishing interval
        clock.now += 0.9
        progress.indexing(3, 10, "/docs/c.pdf", 12)
        seen = running_sync(tmp_path)
        assert seen is not None
        assert (seen["phase"], seen["filesDone"], seen["filesTotal"], seen["chunksWritten"]) == ("indexing", 3, 10, 12)
        assert seen["currentPath"] == "/docs/c.pdf" and seen["filesPerSecond"] == pytest.approx(3.0)
        assert seen["etaSeconds"] == 2  # 7 files left at 3 files/s
        assert forwarded[-1] == ("indexing", 3, 10, "/docs/c.pdf")
        progress.finishing(40)
        assert running_sync(tmp_path)["phase"] == "finishing"
        progress.close()
        assert not (tmp_path / PROGRESS_FILE).exists()
    assert running_sync(tmp_path) is None


def test_a_progress_file_left_by_a_dead_sync_is_not_shown(tmp_path: Path) -> None:
    (tmp_path / PROGRESS_FILE).write_text(json.dumps({"pid": 999999, "phase": "indexing", "filesDone": 5}))
    assert running_sync(tmp_path) is None  # no lock holder at all
    with sync_lock(tmp_path):
        seen = running_sync(tmp_path)
        assert seen is not None and seen["pid"] == os.getpid() and "phase" not in seen


def test_one_progress_line_is_logged_every_interval(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    caplog.set_level(logging.INFO, logger="appliance.sync")
    progress = SyncProgress(tmp_path, "cli", clock=clock)
    for done in range(1, 40):
        clock.now += 1.0
        progress.indexing(done, 100, f"/docs/{done}.md", done * 3)
    lines = [r.getMessage() for r in caplog.records if r.name == "appliance.sync"]
    assert len(lines) == 39 // int(LOG_EVERY_S)
    assert lines[0].startswith("sync (cli): 10/100 files stored, 30 chunks written") and "chunks/s" in lines[0]
    assert "left" in lines[0] and lines[0].endswith("at /docs/10.md")


def _run(fields: dict[str, object]) -> SyncRunning:
    return SyncRunning.model_validate(fields)


def test_progress_lines_read_well_in_every_phase() -> None:
    assert progress_line(_run({"phase": "scanning", "startedBy": "mcp", "filesSeen": 1234, "startedAt": 0}), 5) == \
        "sync (mcp): scanning, 1,234 files seen, 5 s"
    line = progress_line(_run({"phase": "indexing", "startedBy": "cli", "filesDone": 5, "filesTotal": 0,
                               "chunksWritten": 0, "etaSeconds": 125}), 10)
    assert line == "sync (cli): 5/0 files stored, 0 chunks written, about 2 min 5 s left"
    line = progress_line(_run({"phase": "indexing", "startedBy": "cli", "filesDone": 20, "filesTotal": 25,
                               "filesConverted": 25, "chunksWritten": 300, "chunksTotal": 1200,
                               "chunksTotalKnown": True, "chunksPerSecond": 12.5, "etaSeconds": 72}), 10)
    assert line == ("sync (cli): 20/25 files stored (25 converted), 300/1,200 chunks written (25%), "
                    "12.5 chunks/s, about 1 min 12 s left")


def test_an_unwritable_index_does_not_stop_the_sync_from_reporting(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    progress = SyncProgress(missing, "cli")  # cannot write: no error, the sync itself reports the index
    progress.indexing(1, 2, "/x", 1)
    progress.close()
    assert read_last_sync(missing) is None
    save_last_sync(tmp_path, {"added": 1, "finishedAt": 5.0})
    assert read_last_sync(tmp_path) == {"added": 1, "finishedAt": 5.0}


def test_files_count_when_stored_and_the_eta_follows_the_chunks_still_to_write(tmp_path: Path) -> None:
    """Found 3 of issue 30: 168/170 files and "2 s left" for 9 minutes while chunks were still embedded."""
    clock = Clock()
    progress = SyncProgress(tmp_path, "cli", clock=clock)
    clock.now += 1.0
    progress.indexing(0, 10, "/docs/a.md", 0, converted=1, cut=100)  # converted, nothing written yet
    seen = read_json(tmp_path, PROGRESS_FILE)
    assert (seen["filesDone"], seen["filesConverted"], seen["etaSeconds"]) == (0, 1, None)
    assert seen["chunksTotal"] == 1000 and seen["chunksTotalKnown"] is False  # 9 files more at 100 chunks each
    clock.now += 30.0  # the model loads: its first write tells nothing of its pace
    progress.indexing(0, 10, "/docs/e.md", 50, converted=5, cut=500)  # every file of 100 chunks
    seen = read_json(tmp_path, PROGRESS_FILE)
    assert (seen["chunksWritten"], seen["chunksPerSecond"], seen["etaSeconds"]) == (50, None, None)
    clock.now += 10.0
    progress.indexing(1, 10, "/docs/f.md", 100, converted=6, cut=600)
    seen = read_json(tmp_path, PROGRESS_FILE)
    assert seen["chunksPerSecond"] == 5.0 and seen["etaSeconds"] == 180  # 900 chunks left at 5 chunks/s
    clock.now += 4.0
    progress.indexing(1, 10, "/docs/j.md", 100, converted=10, cut=2000)  # the last four were larger
    seen = read_json(tmp_path, PROGRESS_FILE)
    assert (seen["filesDone"], seen["filesConverted"], seen["chunksTotal"], seen["chunksTotalKnown"]) == \
        (1, 10, 2000, True)
    assert seen["etaSeconds"] == 376  # 1,900 chunks left at 5 chunks/s, 4 s of them spent since the last write
