"""minirag:cluster (`make image-cluster`): cluster nodes run from the image with `ray start`.

A head container (no CPUs) and a worker container (2 CPUs) on a Docker network of their own share
the documents (a read-only bind mount) and the index (one volume) at the same paths; the driver
runs `minirag sync --ray` in the head container. The index it builds equals the default image's
local sync of the same folder, and the default image serves it. The default image has no Ray.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docker.conftest import DOCKER

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

CLUSTER_IMAGE = os.environ.get("MINIRAG_CLUSTER_IMAGE", "minirag:cluster")


def _docker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def cluster_image() -> str:
    found = _docker("image", "inspect", CLUSTER_IMAGE, timeout=60)
    if found.returncode != 0:
        pytest.fail(f"image {CLUSTER_IMAGE} is missing: build it with `make image-cluster` ({found.stderr[:200]})")
    return CLUSTER_IMAGE


@pytest.fixture
def cluster(cluster_image: str, docs: Path, volume: str) -> Iterator[str]:
    """The head's container name, once the worker node has joined."""
    tag = uuid.uuid4().hex[:8]
    network, head, worker = f"minirag-net-{tag}", f"minirag-head-{tag}", f"minirag-worker-{tag}"
    token = uuid.uuid4().hex * 2
    common = ["--network", network, "--shm-size", "256m", "-e", "RAY_AUTH_MODE=token", "-e", f"RAY_AUTH_TOKEN={token}",
              "-v", f"{docs}:/docs:ro", "-v", f"{volume}:/index", "--entrypoint", "ray"]
    try:
        assert _docker("network", "create", network).returncode == 0
        started = _docker("run", "-d", "--name", head, "--hostname", head, *common, cluster_image, "start", "--head",
                          "--port", "6379", "--num-cpus", "0", "--include-dashboard=false", "--disable-usage-stats",
                          "--block")
        assert started.returncode == 0, started.stderr
        started = _docker("run", "-d", "--name", worker, *common, cluster_image, "start", "--address", f"{head}:6379",
                          "--num-cpus", "2", "--disable-usage-stats", "--block")
        assert started.returncode == 0, started.stderr
        deadline = time.monotonic() + 120
        while True:  # the worker's CPUs show in the cluster's resources once it has joined
            status = _docker("exec", head, "ray", "status", timeout=60).stdout
            if "/2.0 CPU" in status:
                break
            assert time.monotonic() < deadline, f"the worker never joined:\n{status}\n{_docker('logs', worker).stderr}"
            time.sleep(1)
        yield head
    finally:
        _docker("rm", "-f", head, worker)
        _docker("network", "rm", network)


def _index_rows(volume: str) -> dict[str, tuple[str, str, tuple[float, ...]]]:
    """chunk id -> (source, text, vector) of the index in a volume, read from the host."""
    import lancedb

    mountpoint = _docker("volume", "inspect", "-f", "{{.Mountpoint}}", volume).stdout.strip()
    table = lancedb.connect(mountpoint).open_table("chunks")
    rows = table.to_arrow().select(["id", "source_id", "text", "vector"]).to_pylist()
    return {r["id"]: (r["source_id"], r["text"], tuple(r["vector"])) for r in rows if r["source_id"]}


def test_a_cluster_of_two_containers_builds_the_index_a_local_sync_builds(cluster: str, docs: Path, volume: str,
                                                                           image: str) -> None:
    done = _docker("exec", cluster, "minirag", "sync", "--ray", f"{cluster}:6379", "--json", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    files = sorted(p for p in docs.rglob("*") if p.is_file())
    assert report["failed"] == [] and report["added"] == len(files) and report["chunks"] > 0, report

    # The default image, no network: a local sync of the same folder, and a query over the cluster's index.
    local = f"{volume}-local"
    try:
        synced = _docker("run", "--rm", "--network", "none", "-v", f"{docs}:/docs:ro", "-v", f"{local}:/index",
                         image, "sync", "--json", timeout=600)
        assert synced.returncode == 0, synced.stderr[-3000:]
        ours, theirs = _index_rows(volume), _index_rows(local)
    finally:
        _docker("volume", "rm", "-f", local)
    assert ours.keys() == theirs.keys()
    for cid, (source, text, vector) in ours.items():
        assert (source, text) == theirs[cid][:2], cid
        # A local sync embeds several files' chunks per model call, the cluster one document per
        # task; the int8 model's vectors move slightly with their batch neighbours.
        assert sum(a * b for a, b in zip(vector, theirs[cid][2], strict=True)) > 0.99, cid

    answer = _docker("run", "--rm", "--network", "none", "-v", f"{docs}:/docs:ro", "-v", f"{volume}:/index", image,
                     "query", "how often should solar panels be cleaned", "--top-k", "1", "--json")
    assert answer.returncode == 0, answer.stderr[-2000:]
    assert json.loads(answer.stdout)["results"][0]["displayPath"] == "solar-panel-maintenance.md"


def test_the_default_image_has_no_ray(image: str) -> None:
    done = _docker("run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", "import ray")
    assert done.returncode != 0 and "No module named 'ray'" in done.stderr, done.stderr
