"""An emptied, missing or mostly emptied root never reads as "everything was deleted" (issue 28).

Every sync path runs the same rule (sync_plan.held_roots through indexing.sync): the CLI, the
scheduler's round, MCP sync_start; a second process reads the index afterwards and finds every
file still indexed. `--allow-deletions` / allowDeletions accepts the deletion; a sync under a path
is explicit and deletes what is gone there.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.adapters.scheduler import Scheduler
from appliance.config import load_settings
from appliance.service import Appliance
from tests.fixtures.embedders import MODELS_DIR, HashEmbedder
from tests.fixtures.mcp_calls import ok, serve, wait_for

MINIRAG = str(Path(sys.executable).with_name("minirag"))


def _write(docs: Path, count: int, prefix: str = "note") -> None:
    docs.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        (docs / f"{prefix}{n:02}.md").write_text(f"# Note {n}\n\nThe valve number {n} is checked weekly.\n")


def _empty(docs: Path) -> None:
    for path in docs.iterdir():
        path.unlink()


def _app(tmp_path: Path, docs: Path, **env: str) -> Appliance:
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "db"), "MODELS_DIR": str(MODELS_DIR),
                              **env})
    return Appliance(settings, embedder=HashEmbedder())  # plumbing only: no ranking


def _indexed_elsewhere(docs: Path, db: Path) -> int:
    """Files the index holds, as another process (`minirag status`) reads them."""
    env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME")}
    out = subprocess.run([MINIRAG, "status"], env=env | {"BASE_DIR": str(docs), "DB_PATH": str(db),
                                                          "MODELS_DIR": str(MODELS_DIR)},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    count: int = json.loads(out.stdout)["index"]["sourceCount"]
    return count


# ------------------------------------------------------------------ the rule, in the service

def test_an_empty_root_keeps_every_file_until_deletions_are_allowed(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    _write(docs, 4)
    app = _app(tmp_path, docs)
    assert app.sync().added == 4
    _empty(docs)
    kept = app.sync()
    assert kept.deleted == 0 and not kept.ok
    [held] = kept.held_roots
    assert held.root == str(docs) and held.indexed_files == 4 and held.found_files == 0
    assert str(docs) in held.reason and "is empty" in held.reason and "--allow-deletions" in held.reason
    assert len(app.index.registry.file_sources()) == 4
    accepted = app.sync(allow_deletions=True)
    assert accepted.deleted == 4 and accepted.ok and not app.index.registry.file_sources()


def test_a_missing_root_is_held_and_the_other_roots_sync(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _write(first, 3)
    _write(second, 2)
    app = _app(tmp_path, first, BASE_DIRS=json.dumps([str(first), str(second)]))
    assert app.sync().added == 5
    shutil.rmtree(first)
    (second / "note00.md").unlink()
    _write(second, 3, prefix="new")
    report = app.sync()
    assert [h.root for h in report.held_roots] == [str(first)] and "missing" in report.held_roots[0].reason
    assert report.deleted == 1 and report.added == 3  # the other root synced as usual
    assert sum(1 for s in app.index.registry.file_sources() if s.source_id.startswith(str(first))) == 3


def test_a_root_that_lost_most_files_at_once_asks_for_the_flag(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    _write(docs, 30)
    app = _app(tmp_path, docs)
    app.sync()
    for n in range(5):  # a few deleted by hand: below the limit
        (docs / f"note{n:02}.md").unlink()
    assert app.sync().deleted == 5
    for n in range(5, 25):  # 20 of the remaining 25 at once: above SYNC_DELETE_LIMIT (50%)
        (docs / f"note{n:02}.md").unlink()
    report = app.sync()
    assert report.deleted == 0 and report.held_roots[0].found_files == 5
    assert "SYNC_DELETE_LIMIT=50%" in report.held_roots[0].reason
    assert len(app.index.registry.file_sources()) == 25
    relaxed = _app(tmp_path, docs, SYNC_DELETE_LIMIT="90")  # the setting moves the limit
    assert relaxed.sync().deleted == 20


def test_a_renamed_folder_is_not_a_loss(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    _write(docs / "old", 20)
    app = _app(tmp_path, docs)
    app.sync()
    (docs / "old").rename(docs / "new")
    report = app.sync()
    assert report.ok and report.deleted == 20 and report.added == 20


def test_explicit_paths_and_the_flag_with_clean_still_delete(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    _write(docs / "sub", 12)
    _write(docs, 1)
    app = _app(tmp_path, docs)
    app.sync()
    _empty(docs / "sub")
    assert app.sync(docs / "sub").deleted == 12  # a sync under a path does what it is told
    shutil.rmtree(docs / "sub")
    _empty(docs)
    assert app.sync(clean=True).held_roots  # a rebuild keeps an emptied root's files too ...
    assert len(app.index.registry.file_sources()) == 1
    assert app.sync(clean=True, allow_deletions=True).ok and not app.index.registry.file_sources()  # ... unless told


# ------------------------------------------------------------------ every path: CLI, scheduler, MCP

@pytest.mark.slow  # `minirag sync` and `minirag status` subprocesses
def test_cli_sync_over_an_emptied_root_exits_1_and_keeps_the_index(tmp_path: Path) -> None:
    docs, db = tmp_path / "docs", tmp_path / "db"
    _write(docs, 3)
    env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME")}
    env |= {"BASE_DIR": str(docs), "DB_PATH": str(db), "MODELS_DIR": str(MODELS_DIR)}

    def sync(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([MINIRAG, "sync", *args], env=env, capture_output=True, text=True, timeout=600)

    assert sync().returncode == 0
    _empty(docs)
    refused = sync()
    assert refused.returncode == 1, refused.stdout
    assert f"error: the document root {docs} is empty" in refused.stderr and "--allow-deletions" in refused.stderr
    assert _indexed_elsewhere(docs, db) == 3
    as_json = sync("--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["heldRoots"][0]["indexedFiles"] == 3
    accepted = sync("--allow-deletions", "--json")
    assert accepted.returncode == 0 and json.loads(accepted.stdout)["deleted"] == 3
    assert _indexed_elsewhere(docs, db) == 0


@pytest.mark.slow  # a `minirag status` subprocess
def test_scheduled_round_keeps_a_mostly_emptied_root(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    _write(docs, 20)
    _app(tmp_path, docs).sync()
    for n in range(18):
        (docs / f"note{n:02}.md").unlink()
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "db"), "MODELS_DIR": str(MODELS_DIR),
                              "SYNC_INTERVAL": "60"})
    scheduler = Scheduler(settings, clock=time.time)
    scheduler.round()
    assert scheduler.state["lastResult"] == "partial"
    assert scheduler.state["lastError"]["code"] == "root_held" and str(docs) in scheduler.state["lastError"]["message"]
    assert _indexed_elsewhere(docs, tmp_path / "db") == 20


@pytest.mark.slow  # a `minirag status` subprocess
def test_mcp_sync_start_holds_an_emptied_root_until_allow_deletions(tmp_path: Path) -> None:
    server, docs = serve(tmp_path)
    _write(docs, 4)
    assert wait_for(server, ok(server, "sync_start", {}))["counts"]["added"] == 4
    _empty(docs)
    job: dict[str, Any] = wait_for(server, ok(server, "sync_start", {}))
    assert job["phase"] == "succeeded" and job["counts"]["deleted"] == 0
    assert job["heldRoots"][0]["root"] == str(docs) and "allowDeletions" in job["heldRoots"][0]["reason"]
    assert _indexed_elsewhere(docs, tmp_path / "db") == 4
    accepted = wait_for(server, ok(server, "sync_start", {"allowDeletions": True}))
    assert accepted["phase"] == "succeeded", accepted
    assert accepted["counts"]["deleted"] == 4 and accepted["heldRoots"] == []
    assert _indexed_elsewhere(docs, tmp_path / "db") == 0
