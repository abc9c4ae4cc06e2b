"""A no-change sync proved from the stamp the last one left (appliance/sync/stamp.py): it answers
only when nothing it depends on moved — files, settings, the index's commits by anyone — and
`minirag sync` then answers without importing LanceDB."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from appliance.errors import SyncBusy
from appliance.results import Tally
from appliance.storage.locking import sync_lock
from appliance.sync import stamp as sync_stamp

ROOT = Path(__file__).resolve().parents[2]
FILES = {"a.md": "# Alpha\n\nThe harbour lantern is lit at dusk.\n",
         "sub/b.txt": "Beta: the glacier ledger lists every ferry.\n",
         "broken.md": None}  # binary: a named failure the replayed report must repeat


@pytest.fixture
def app(tmp_path: Path, make_app: Callable[..., Any]) -> Any:
    docs = tmp_path / "docs"
    for name, text in FILES.items():
        path = docs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            path.write_bytes(os.urandom(1024) + b"\0" * 64)
        else:
            path.write_text(text, "utf-8")
    built = make_app(docs)
    first = built.sync()
    assert first.added == 2 and len(first.failed) == 1
    return built


def _same(replayed: Any, full: Any) -> None:
    keys = ("seen", "added", "updated", "unchanged", "refreshed", "deleted", "skipped", "failed", "chunks")
    assert {k: replayed.to_dict()[k] for k in keys} == {k: full.to_dict()[k] for k in keys}


def test_a_sync_that_changed_something_leaves_no_stamp_and_a_quiet_one_does(app: Any) -> None:
    assert sync_stamp.replay(app.settings) is None  # the first sync added files
    quiet = app.sync()
    assert quiet.unchanged == 2 and len(quiet.failed) == 1
    replayed = sync_stamp.replay(app.settings)
    assert replayed is not None
    _same(replayed, quiet)
    assert replayed.failed[0].path.endswith("broken.md")


@pytest.mark.parametrize("change", ["edit", "touch", "add", "delete", "ignore_rule"])
def test_any_file_change_sends_the_sync_down_its_full_path(app: Any, change: str) -> None:
    app.sync()
    docs = app.settings.roots[0]
    if change == "edit":
        (docs / "a.md").write_text("# Alpha\n\nThe harbour lantern is lit at dawn.\n", "utf-8")
    elif change == "touch":
        stat = (docs / "a.md").stat()
        os.utime(docs / "a.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    elif change == "add":
        (docs / "c.md").write_text("# Gamma\n", "utf-8")
    elif change == "delete":
        (docs / "sub" / "b.txt").unlink()
    else:
        (docs / ".indexignore").write_text("sub/\n", "utf-8")
    assert sync_stamp.replay(app.settings) is None
    full = app.sync()
    assert full.unchanged < 2 or full.refreshed or full.added or full.deleted


def test_another_writer_in_between_is_seen(app: Any, make_app: Callable[..., Any]) -> None:
    app.sync()
    other = make_app(app.settings.roots[0])  # another Appliance (its own LanceDB handles) on the index
    other.ingest_data("notes/x", "A note about the copper violin.")
    assert sync_stamp.replay(app.settings) is None


def test_a_commit_during_the_quiet_sync_leaves_no_stamp(app: Any, make_app: Callable[..., Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    other = make_app(app.settings.roots[0])
    finish = Tally.finish

    committed: list[bool] = []

    def commit_then_finish(tally: Tally) -> Any:  # after the sync's reads, before its stamp
        if not committed:
            committed.append(True)  # ingest_data finishes its own tally through here too
            other.ingest_data("notes/during", "Written while the sync ran.")
        return finish(tally)

    monkeypatch.setattr(Tally, "finish", commit_then_finish)
    quiet = app.sync()
    assert quiet.unchanged == 2
    assert sync_stamp.replay(app.settings) is None


def test_other_settings_and_hash_detection_never_replay(app: Any) -> None:
    app.sync()
    assert sync_stamp.replay(app.settings) is not None
    assert sync_stamp.replay(dataclasses.replace(app.settings, chunk_token_budget=128)) is None
    assert sync_stamp.replay(dataclasses.replace(app.settings, change_detection="hash")) is None


def test_the_replay_takes_the_sync_lock(app: Any) -> None:
    app.sync()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with sync_lock(app.settings.db_path):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        held.wait(10)
        with pytest.raises(SyncBusy):
            sync_stamp.replay(app.settings)
    finally:
        release.set()
        thread.join()


@pytest.mark.slow  # two `minirag sync` processes
def test_minirag_sync_answers_a_quiet_folder_without_importing_lancedb(app: Any) -> None:
    env = dict(os.environ, BASE_DIR=str(app.settings.roots[0]), DB_PATH=str(app.settings.db_path),
               MODELS_DIR=str(app.settings.models_dir), PYTHONPATH=str(ROOT))
    env.pop("BASE_DIRS", None)
    runs = [subprocess.run([sys.executable, "-X", "importtime", "-m", "appliance", "sync", "--json"], env=env,
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    for run in runs:  # 1: a file failed, in the replayed report as in the full one
        assert run.returncode == 1 and "broken.md" in run.stdout, run.stderr[-2000:]
    imported = [{line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if "|" in line}
                for run in runs]
    assert "lancedb" in imported[0]  # the first: the stamp the in-process syncs left had other settings
    assert "lancedb" not in imported[1] and "fastembed" not in imported[1]
    assert '"unchanged": 2' in runs[1].stdout and '"failedCount": 1' in runs[1].stdout
