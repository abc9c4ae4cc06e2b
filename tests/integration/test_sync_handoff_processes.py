"""`minirag sync` beside a real `minirag serve` on the same index: the warm server runs it, a sync
asked with --here or with other settings runs in the CLI's own process, and the CLI's Ctrl-C stops
the server's sync (the server answers on, the next sync finishes the rest)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.storage.locking import lock_holder
from tests.adapters.conftest import MINIRAG
from tests.adapters.test_start_path import RawStdio

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
RUN_BY_SERVER = "(run by the warm server on this index)"


def _notes(docs: Path, first: int, count: int) -> None:
    for n in range(first, first + count):
        (docs / f"d{n // 100}").mkdir(exist_ok=True)
        (docs / f"d{n // 100}" / f"note-{n:04d}.md").write_text(
            f"# Note {n}\n\nThe lock keeper logged barge {n} passing the upper gate at dawn; "
            f"the tow rope of barge {n} was checked twice.\n", "utf-8")


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[tuple[RawStdio, dict[str, str], Path]]:
    docs = tmp_path / "docs"
    docs.mkdir()
    _notes(docs, 0, 5)
    env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME", "MCP_INSTRUCTIONS_EXTRA")}
    env |= {"BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "index"), "SYNC_INTERVAL": "0"}
    server = RawStdio([MINIRAG, "serve"], env)
    server.handshake()
    server.send(2, "tools/list")
    server.reply(2)  # clients list the tools: the warm-up starts, and with it the listener
    deadline = time.monotonic() + 120
    while not (tmp_path / "index" / ".sync.sock").exists():
        assert time.monotonic() < deadline, "the warm server never listened for syncs"
        time.sleep(0.2)
    try:
        yield server, env, tmp_path / "index"
    finally:
        server.close()
    assert not (tmp_path / "index" / ".sync.sock").exists()  # the server took its socket with it


def _sync(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MINIRAG, "sync", *args], env=env, capture_output=True, text=True, timeout=600)


def test_the_warm_server_runs_the_cli_sync(warm: tuple[RawStdio, dict[str, str], Path]) -> None:
    server, env, _index = warm
    first = _sync(env)
    assert first.returncode == 0 and RUN_BY_SERVER in first.stderr, first.stderr[-2000:]
    assert "added 5" in first.stdout
    (Path(env["BASE_DIR"]) / "d0" / "note-0001.md").write_text("# Note 1\n\nA rope snapped at the weir.\n", "utf-8")
    as_json = _sync(env, "--json")
    assert as_json.returncode == 0 and RUN_BY_SERVER not in as_json.stderr
    assert json.loads(as_json.stdout)["updated"] == 1
    here = _sync(env, "--here", "--json")  # nothing changed: answered by the stamp, in the CLI
    assert here.returncode == 0 and json.loads(here.stdout)["unchanged"] == 5
    _notes(Path(env["BASE_DIR"]), 5, 1)
    other = _sync({**env, "SYNC_INTERVAL": "60"})  # any other setting: the server declines, the CLI syncs
    assert other.returncode == 0 and RUN_BY_SERVER not in other.stderr and "added 1" in other.stdout
    found = server.call(3, {"name": "query_documents", "arguments": {"query": "rope snapped at the weir", "topK": 1}})
    assert found["structuredContent"]["results"][0]["displayPath"] == "d0/note-0001.md"


def test_ctrl_c_of_the_cli_stops_the_servers_sync(warm: tuple[RawStdio, dict[str, str], Path]) -> None:
    server, env, index = warm
    _notes(Path(env["BASE_DIR"]), 5, 1500)
    cli = subprocess.Popen([MINIRAG, "sync", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    deadline = time.monotonic() + 120
    while lock_holder(index) is None:  # the server's sync has started
        assert time.monotonic() < deadline and cli.poll() is None, cli.communicate()
        time.sleep(0.1)
    holder = lock_holder(index)
    assert holder is not None and holder.get("pid") == server.proc.pid  # the server syncs, not the CLI
    time.sleep(0.5)
    started = time.monotonic()
    cli.send_signal(signal.SIGINT)
    _, err = cli.communicate(timeout=60)
    assert cli.returncode == 130, err[-2000:]
    deadline = time.monotonic() + 30
    while lock_holder(index) is not None:  # the server's sync stopped too
        assert time.monotonic() < deadline, "the server's sync went on after its client left"
        time.sleep(0.1)
    status = server.call(4, {"name": "status", "arguments": {}})["structuredContent"]
    assert status["index"]["sourceCount"] < 1505, time.monotonic() - started  # stopped part-way
    rest = _sync(env, "--json")
    assert rest.returncode == 0, rest.stderr[-2000:]
    assert json.loads(rest.stdout)["seen"] == 1505
    status = server.call(5, {"name": "status", "arguments": {}})["structuredContent"]
    assert status["index"]["sourceCount"] == 1505 and "consistencyWarning" not in status["index"]


def test_a_daemon_warms_up_at_start_and_takes_the_sync(tmp_path: Path) -> None:
    from tests.fixtures.serve_http import start_serve_http, stop

    docs = tmp_path / "docs"
    docs.mkdir()
    _notes(docs, 0, 3)
    env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME", "MCP_INSTRUCTIONS_EXTRA")}
    env |= {"BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "index"), "SYNC_INTERVAL": "0"}
    daemon, _url = start_serve_http(env, tmp_path / "daemon.log")
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "index" / ".sync.sock").exists():  # no client has asked anything yet
            assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-2000:]
            time.sleep(0.2)
        done = _sync(env)
        assert done.returncode == 0 and RUN_BY_SERVER in done.stderr and "added 3" in done.stdout
    finally:
        stop(daemon)
