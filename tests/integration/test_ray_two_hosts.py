"""`minirag sync --ray HEAD:PORT` across two network hosts: the head node in this network namespace,
a worker node in another one joined by a veth pair, so the driver reaches the cluster over a
network address rather than loopback, through the CLI with its egress guard on. The head offers no
CPUs, so every task runs on the other host; the index equals a local sync's.

Needs root (`ip netns`) and the [cluster] extra, and no other Ray cluster on the machine (the test ends
with `ray stop`); skipped, saying so, otherwise.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

pytest.importorskip("ray", reason="Ray is not installed (the [cluster] extra): `make test-ray` installs it")

from tests.integration.test_ray_sync import FILES, _app, _assert_same, _contents, docs  # noqa: F401 (docs: a fixture)

pytestmark = [pytest.mark.ray, pytest.mark.model, pytest.mark.timeout(900)]

HEAD_IP, WORKER_IP, PORT = "10.77.0.1", "10.77.0.2", 6391
RAY = str(Path(sys.executable).with_name("ray"))
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex * 2}
"""Ray's token authentication, as a multi-host cluster runs it: every node and the driver hold the one token."""


def _run(*args: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def two_hosts(models_dir: Path) -> Iterator[str]:
    """A Ray head here (no CPUs) and a 2-CPU worker node in a network namespace of its own."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a second network host (ip netns)")
    if _run("pgrep", "-x", "raylet").returncode == 0:  # `ray stop` at the end would stop it too
        pytest.skip("another Ray cluster runs on this machine")
    name = f"minirag-{uuid.uuid4().hex[:6]}"
    host_end, node_end = f"vh{name[-6:]}", f"vn{name[-6:]}"
    setup = [["ip", "netns", "add", name],
             ["ip", "link", "add", host_end, "type", "veth", "peer", "name", node_end],
             ["ip", "link", "set", node_end, "netns", name],
             ["ip", "addr", "add", f"{HEAD_IP}/30", "dev", host_end], ["ip", "link", "set", host_end, "up"],
             ["ip", "netns", "exec", name, "ip", "addr", "add", f"{WORKER_IP}/30", "dev", node_end],
             ["ip", "netns", "exec", name, "ip", "link", "set", node_end, "up"],
             ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"]]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELS_DIR": str(models_dir), "RAY_USAGE_STATS_ENABLED": "0",
           **AUTH}
    try:
        for step in setup:
            done = _run(*step)
            if done.returncode != 0:
                pytest.skip(f"cannot make a second network host here ({' '.join(step)}: {done.stderr.strip()})")
        head = _run(RAY, "start", "--head", "--node-ip-address", HEAD_IP, "--port", str(PORT), "--num-cpus", "0",
                    "--include-dashboard=false", "--disable-usage-stats", env=env)
        assert head.returncode == 0, head.stderr
        worker = _run("ip", "netns", "exec", name, RAY, "start", "--address", f"{HEAD_IP}:{PORT}",
                      "--node-ip-address", WORKER_IP, "--num-cpus", "2", "--disable-usage-stats", env=env)
        assert worker.returncode == 0, worker.stderr
        yield f"{HEAD_IP}:{PORT}"
    finally:
        _run(RAY, "stop", "--force")
        _run("ip", "link", "del", host_end)
        _run("ip", "netns", "del", name)


def test_a_sync_on_a_cluster_of_two_hosts_equals_a_local_sync(two_hosts: str, docs: Path, models_dir: Path,  # noqa: F811
                                                              real_embedder: Any, tmp_path: Path) -> None:
    import appliance.indexing as indexing

    index = tmp_path / "index"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BASE_DIR": str(docs), "DB_PATH": str(index),
           "MODELS_DIR": str(models_dir), **AUTH}
    done = subprocess.run([sys.executable, "-m", "appliance", "sync", "--json", "--ray", two_hosts], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["failed"] == [] and report["added"] == len(FILES), report

    with pytest.MonkeyPatch.context() as patch:  # each document in a model call of its own, as a Ray task embeds it
        patch.setattr(indexing, "EMBED_BATCH_CHUNKS", 1)
        local = _app(docs, tmp_path / "local", models_dir, real_embedder)
        assert local.sync().added == len(FILES)
    _assert_same(_contents(_app(docs, index, models_dir)), _contents(local))
