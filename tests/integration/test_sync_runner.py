"""Every caller's sync goes through one runner (appliance/sync/runner.py): a quiet scheduled round and a
quiet MCP sync_start are answered by the stamp without opening the index or running a sync; a commit by
another process sends them down the full path; only the CLI hands its sync to a warm server, and only
the CLI reads RAY_ADDRESS. Real LanceDB and model."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from appliance import service
from appliance.adapters.scheduler import Scheduler
from appliance.cluster import ClusterUnreachable
from appliance.config import load_settings
from appliance.sync import indexing, runner as sync_runner
from appliance.sync.runner import Caller, SyncRequest
from appliance.sync.stamp import STAMP_FILE
from appliance.sync.state import read_last_sync

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROOT = Path(__file__).resolve().parents[2]
FILES = {"a.md": "# Alpha\n\nThe harbour lantern is lit at dusk.\n",
         "sub/b.txt": "Beta: the glacier ledger lists every ferry.\n"}


def _write(docs: Path) -> None:
    for name, text in FILES.items():
        path = docs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")


@pytest.fixture
def quiet(tmp_path: Path, make_app: Callable[..., Any]) -> Any:
    """An Appliance whose last sync found nothing to do, so it left a stamp."""
    docs = tmp_path / "docs"
    _write(docs)
    app = make_app(docs)
    assert app.sync().added == 2
    assert app.sync().unchanged == 2
    assert (app.settings.db_path / STAMP_FILE).exists()
    return app


def _refuse(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("the sync ran here although the stamp proves there is nothing to do")


def test_a_quiet_scheduled_round_is_answered_by_the_stamp_without_opening_the_index(
        quiet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "Appliance", _refuse)  # what the round opens for a sync here
    monkeypatch.setattr(indexing, "sync", _refuse)
    scheduler = Scheduler(quiet.settings)
    scheduler.round()
    assert scheduler.state["lastResult"] == "ok", scheduler.state
    assert scheduler.state["lastReport"]["unchanged"] == 2 and scheduler.state["lastRunStartedAt"] is not None
    assert (read_last_sync(quiet.settings.db_path) or {}).get("unchanged") == 2


def test_a_quiet_sync_start_is_answered_by_the_stamp(quiet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexing, "sync", _refuse)
    job = quiet.sync_start()
    assert quiet._jobs().wait_finished([job.job_id], 60)
    done = quiet.sync_status(job.job_id)
    assert done.phase == "succeeded" and done.counts["unchanged"] == 2, done


def test_a_sync_start_that_may_delete_runs_here(quiet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    real = indexing.sync

    def spy(core: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(kwargs["origin"])
        return real(core, *args, **kwargs)

    monkeypatch.setattr(indexing, "sync", spy)
    job = quiet.sync_start(allow_deletions=True)  # not a plain sync: no stamp answers it
    assert quiet._jobs().wait_finished([job.job_id], 120)
    assert quiet.sync_status(job.job_id).phase == "succeeded"
    assert ran == ["mcp"]


def test_only_the_cli_hands_its_sync_to_a_warm_server(tmp_path: Path, make_app: Callable[..., Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    _write(docs)
    server = make_app(docs)
    served: list[str] = []
    server_sync = server.sync

    def spy(*args: Any, **kwargs: Any) -> Any:
        served.append(kwargs["origin"])
        return server_sync(*args, **kwargs)

    monkeypatch.setattr(server, "sync", spy)
    listener = sync_runner.listener(server)
    assert listener.start()
    client = make_app(docs)  # another Appliance (its own LanceDB handles) on the same index
    try:
        routes = []
        callers: tuple[Caller, ...] = ("scheduler", "mcp", "cli")
        for n, caller in enumerate(callers):
            (docs / f"new-{n}.md").write_text(f"# New {n}\n\nThe ferry log gains line {n}.\n", "utf-8")
            outcome = sync_runner.run(client.settings, SyncRequest(), caller, lambda: client)
            assert outcome.report.added == (3 if n == 0 else 1)
            routes.append(outcome.route)
        (docs / "new-3.md").write_text("# New 3\n\nThe ferry log gains line 3.\n", "utf-8")
        routes.append(sync_runner.run(client.settings, SyncRequest(here=True), "cli", lambda: client).route)
    finally:
        listener.close()
    assert routes == ["local", "local", "handoff", "local"]
    assert served == ["cli"]  # the warm server ran the CLI's sync, under the CLI's name, without a replay


def test_only_the_cli_reads_ray_address(tmp_path: Path, make_app: Callable[..., Any]) -> None:
    docs = tmp_path / "docs"
    _write(docs)
    app = make_app(docs)
    settings = dataclasses.replace(app.settings, ray_address="127.0.0.1:1")  # nothing listens there
    assert sync_runner.run(settings, SyncRequest(), "scheduler", lambda: app).route == "local"
    (docs / "c.md").write_text("# Gamma\n", "utf-8")
    pytest.importorskip("ray")
    with pytest.raises(ClusterUnreachable):
        sync_runner.run(settings, SyncRequest(), "cli", lambda: app)
    assert app.index.registry.source(str((docs / "c.md").resolve())) is None  # refused before anything was written
    assert (read_last_sync(settings.db_path) or {}).get("seen") == 2


@pytest.mark.slow  # scheduler round processes and a `minirag delete` process
def test_the_round_process_replays_without_lancedb_and_sees_another_process_commit(quiet: Any) -> None:
    settings = quiet.settings
    env = dict(os.environ, BASE_DIR=str(settings.roots[0]), DB_PATH=str(settings.db_path),
               MODELS_DIR=str(settings.models_dir), PYTHONPATH=str(ROOT), SYNC_INTERVAL="60")
    env.pop("BASE_DIRS", None)

    def round_process() -> tuple[dict[str, Any], set[str]]:
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "appliance.adapters.scheduler",
                               "--round", "{}", ""],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
        return json.loads(done.stdout.strip().splitlines()[-1])["state"], imported

    first, _ = round_process()  # the in-process syncs stamped other settings: this round stamps its own
    assert first["lastResult"] == "ok" and first["lastReport"]["unchanged"] == 2
    second, imported = round_process()
    assert second["lastResult"] == "ok" and second["lastReport"]["unchanged"] == 2
    assert "lancedb" not in imported and "fastembed" not in imported
    deleted = subprocess.run([sys.executable, "-m", "appliance", "delete", str(settings.roots[0] / "a.md")],
                             env=env, capture_output=True, text=True, timeout=300)
    assert deleted.returncode == 0, deleted.stderr[-2000:]
    third, imported = round_process()  # the other process's commit: no replay, the round indexes a.md again
    assert third["lastResult"] == "ok" and third["lastReport"]["added"] == 1, third
    assert "lancedb" in imported


@pytest.mark.slow  # a scheduler round process
def test_a_stop_that_comes_while_the_round_process_starts_still_stops_it(tmp_path: Path, models_dir: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler forwards a stop to its round process; one that came while the process was being started
    found none to forward to, and the round synced on until supervisord killed the scheduler."""
    docs, db = tmp_path / "docs", tmp_path / "index"
    _write(docs)
    for name, value in {"BASE_DIR": str(docs), "DB_PATH": str(db), "MODELS_DIR": str(models_dir),
                        "PYTHONPATH": str(ROOT), "SYNC_INTERVAL": "60"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("BASE_DIRS", raising=False)
    scheduler = Scheduler(load_settings(dict(os.environ)))
    scheduler.stop_event.set()  # as stop() does, before there is a child to signal
    scheduler.round_in_child()
    assert not any(db.glob("*.lance")), "the round synced although the scheduler was stopping"
    assert scheduler.state["lastResult"] is None and scheduler.state["failures"] == 0
