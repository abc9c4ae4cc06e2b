"""Storage faults: a full disk, a read-only index, damaged index files.

The scenario tests run a reduced `scripts/faults_storage.py` (tiny model, small
corpus) in a private mount namespace with real tmpfs and bind mounts, real
`minirag` processes and a real `minirag serve`. The regression tests below them
check each fix in-process.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.errors import DiskFull, IndexCorrupt, IndexUnwritable, storage_error

pytestmark = [pytest.mark.faults, pytest.mark.timeout(1800)]  # ~20 process starts: past 600 s on a loaded machine

ROOT = Path(__file__).resolve().parents[2]
DAMAGE = ["truncate-chunks-data", "delete-latest-chunks-manifest", "delete-identity", "garbage-chunks-manifest"]


@pytest.fixture(scope="module")
def outcome(shared) -> dict:  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("the storage scenarios mount tmpfs and read-only binds, which needs root")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "faults_storage.py"), "--json", "--model", "tiny", "--files", "10",
         "--free-kb", "16", "--quick", "--damage", ",".join(DAMAGE), "--mcp", "truncate-chunks-data"],
        cwd=ROOT, env={**os.environ, "MINIRAG_SHARED": str(shared)}, capture_output=True, text=True, timeout=1700)
    assert proc.stdout, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_sync_that_fills_the_disk_fails_by_name_and_the_next_one_converges(outcome) -> None:  # type: ignore[no-untyped-def]
    [run] = outcome["diskFull"]
    assert run["problems"] == []
    assert run["sync"]["rc"] == 1 and not run["sync"]["traceback"]
    assert run["sync"]["error"]["code"] == "disk_full" and "is full" in run["sync"]["error"]["message"]


def test_a_read_only_index_refuses_writes_by_name_and_still_answers(outcome) -> None:  # type: ignore[no-untyped-def]
    run = outcome["readOnly"]
    assert run["problems"] == []
    for name in ("sync", "ingest"):
        assert run[name]["rc"] == 1 and "read-only filesystem" in run[name]["said"] and "hint:" in run[name]["said"]


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_index_is_reported_with_its_fix_and_recovers(outcome, kind: str) -> None:  # type: ignore[no-untyped-def]
    [run] = [r for r in outcome["damaged"] if r["kind"] == kind]
    assert run["problems"] == []
    if kind in ("truncate-chunks-data", "garbage-chunks-manifest"):
        assert run["status"]["code"] == "index_corrupt" and "minirag sync --clean" in run["status"]["hint"]
    if kind == "delete-identity":
        assert "identity.json is missing" in run["status"]["identityWarning"]


def test_the_mcp_server_reports_a_damaged_index_and_recovers_without_restart(outcome) -> None:  # type: ignore[no-untyped-def]
    [run] = [r for r in outcome["damaged"] if "mcp" in r]
    assert run["mcp"]["initialize"] and run["mcp"]["aliveAtEnd"]
    assert run["mcp"]["query"]["code"] == "index_corrupt"
    assert run["mcp"]["queryAfterClean"] == "answered"


# ---- regressions, in-process -------------------------------------------------------------
def test_storage_failures_get_named_errors() -> None:
    assert isinstance(storage_error(OSError(errno.ENOSPC, "No space left on device"), "the index at /i"), DiskFull)
    assert isinstance(storage_error(OSError(errno.EROFS, "Read-only file system"), "the index at /i"), IndexUnwritable)
    lance = RuntimeError("lance error: LanceError(IO): Generic LocalFileSystem error: failed to fill whole buffer, "
                         "/rustc/abc/library/core/src/ops/function.rs:250:5")
    named = storage_error(lance, "the index at /i")
    assert isinstance(named, IndexCorrupt) and ".rs:" not in named.message
    assert isinstance(storage_error(RuntimeError("lance error: IO: os error 28"), "x"), DiskFull)
    assert storage_error(ValueError("an unrelated bug"), "x") is None


def _indexed(make_app):  # type: ignore[no-untyped-def]
    app = make_app()
    docs = app.settings.roots[0]
    (docs / "a.md").write_text("# Harbour\n\nThe lantern by the harbour is lit at dusk.\n", "utf-8")
    app.sync()
    return app


def test_status_warns_when_the_chunks_are_gone_and_sync_restores_them(make_app) -> None:  # type: ignore[no-untyped-def]
    # Every chunks manifest deleted: LanceDB opens an empty table, the sources table
    # still says "indexed"; before the fix status was silent and sync never re-indexed.
    app = _indexed(make_app)
    for manifest in (app.settings.db_path / "chunks.lance" / "_versions").glob("*.manifest"):
        manifest.unlink()
    (app.settings.db_path / "identity.json").unlink()
    index = make_app().status().wire()["index"]
    assert index["chunkCount"] == 0 and "minirag sync" in index["consistencyWarning"]
    assert "identity.json is missing" not in index.get("identityWarning", "")  # no chunks, nothing unknown
    make_app().sync()
    assert make_app().search("harbour lantern").results
    assert make_app().status().index.consistency_warning is None


def test_status_warns_when_identity_is_missing_beside_chunks(make_app) -> None:  # type: ignore[no-untyped-def]
    app = _indexed(make_app)
    (app.settings.db_path / "identity.json").unlink()
    assert "sync --full" in make_app().status().index.identity_warning
