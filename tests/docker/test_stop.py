"""The container stops in time: `docker stop` during a sync exits 0 well inside Docker's 10 s grace,
and closing the MCP client's stdin ends the container within seconds (issue #14 points 6 and 9c).

Built by `make image` beforehand (MINIRAG_IMAGE names it); these tests build nothing.
"""
from __future__ import annotations

import json
import random
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from appliance.storage.writes import FOLD_DUE_ROWS
from scripts.faults_crash import generated_text
from tests.docker.conftest import DOCKER
from tests.docker.test_image import McpContainer, docker_run

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

FILES = 400
PARAGRAPHS = 6
"""Generated Markdown files of about 6 chunks each: a sync of a minute or more on two cores."""


@pytest.fixture
def many_docs(tmp_path: Path) -> Path:
    docs = tmp_path / "many"
    docs.mkdir()
    rng = random.Random(7)
    for i in range(FILES):
        (docs / f"doc{i:03d}.md").write_text(generated_text(rng, i, PARAGRAPHS), "utf-8")
    docs.chmod(0o755)
    return docs


def _index_dir(tmp_path: Path, name: str) -> Path:
    """A bind-mounted /index the container's uid 1000 can write and the test can watch."""
    path = tmp_path / name
    path.mkdir()
    path.chmod(0o777)
    return path


def _wait_for_a_write(mcp: McpContainer, index: Path, timeout: float = 600) -> None:
    """Until the scheduler's sync recorded some sources, while the container runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        versions = index / "sources.lance" / "_versions"
        if versions.is_dir() and len(list(versions.glob("*.manifest"))) >= 3:
            return
        assert mcp.proc.poll() is None, mcp.err_text()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"the scheduler wrote nothing in {timeout} s: {mcp.err_text()[-3000:]}")


def _status(image: str, docs: Path, index: Path) -> dict:  # type: ignore[type-arg]
    out = docker_run(image, "status", mounts=[f"{docs}:/docs:ro", f"{index}:/index"])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_docker_stop_during_a_sync_exits_0_within_the_grace(image: str, many_docs: Path, tmp_path: Path) -> None:
    index = _index_dir(tmp_path, "index")
    # the scheduler syncs once the server is warm
    mcp = McpContainer(image, [f"{many_docs}:/docs:ro", f"{index}:/index"])
    try:
        mcp.handshake()  # as clients do: the server warms up, then the scheduler starts
        _wait_for_a_write(mcp, index)
        started = time.monotonic()
        subprocess.run([DOCKER, "stop", mcp.name], capture_output=True, timeout=60, check=True)
        code = mcp.proc.wait(timeout=60)
        elapsed = time.monotonic() - started
    finally:
        if mcp.proc.poll() is None:
            subprocess.run([DOCKER, "kill", mcp.name], capture_output=True)
    print(f"docker stop during a sync: exit {code} after {elapsed:.2f} s")
    assert code == 0, mcp.err_text()[-3000:]
    assert elapsed < 10, f"{elapsed:.1f} s: Docker's SIGKILL came first"
    assert elapsed < 7, f"{elapsed:.1f} s: longer than the entrypoint's own bound"
    state = json.loads((index / "scheduler.json").read_text())
    assert state["state"] == "stopped" and state["lastResult"] == "abandoned", state

    stopped = _status(image, many_docs, index)
    assert stopped["scheduler"]["state"] == "stopped" and stopped["syncRunning"] is None
    assert "consistencyWarning" not in stopped["index"], stopped["index"]
    assert 0 < stopped["index"]["sourceCount"] < FILES

    done = docker_run(image, "sync", mounts=[f"{many_docs}:/docs:ro", f"{index}:/index"], timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    final = _status(image, many_docs, index)["index"]
    assert final["sourceCount"] == FILES and final["failedCount"] == 0, final
    assert "consistencyWarning" not in final and final["unindexedRows"] < FOLD_DUE_ROWS, final


def test_closing_stdin_ends_the_container_within_seconds(image: str, many_docs: Path, tmp_path: Path) -> None:
    """Five times: a client connects, the scheduler is mid-sync, the client closes stdin."""
    times = []
    for run in range(5):
        index = _index_dir(tmp_path, f"index{run}")
        mcp = McpContainer(image, [f"{many_docs}:/docs:ro", f"{index}:/index"])
        try:
            mcp.handshake()
            _wait_for_a_write(mcp, index)
            started = time.monotonic()
            code = mcp.close(timeout=30)
            times.append(time.monotonic() - started)
        finally:
            if mcp.proc.poll() is None:
                subprocess.run([DOCKER, "kill", mcp.name], capture_output=True)
        assert code == 0, mcp.err_text()[-3000:]
        state = json.loads((index / "scheduler.json").read_text())
        assert state["state"] == "stopped", (state, mcp.err_text()[-3000:])  # the log says where the stop hung
    print(f"stdin closed -> container gone: median {statistics.median(times):.2f} s, "
          f"all {[round(t, 2) for t in times]}")
    assert statistics.median(times) < 4 and max(times) < 7, times
