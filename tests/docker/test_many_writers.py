"""Many processes on one index, in the image: two client containers on one volume while
their schedulers sync, and a host process beside the container's index."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.docker.conftest import DOCKER
from tests.docker.test_image import McpContainer, docker_run

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _more_docs(docs: Path, n: int, tag: str) -> None:
    extra = docs / "extra"
    extra.mkdir(exist_ok=True)
    for i in range(n):
        (extra / f"{tag}-{i:03d}.md").write_text(f"# Extra {tag} {i}\n\nA generated note {i} about canal locks "
                                                 f"and barge traffic, round {tag}.\n")


def test_two_containers_ingest_while_their_schedulers_sync(image: str, docs: Path, volume: str) -> None:
    _more_docs(docs, 40, "a")
    mounts = [f"{docs}:/docs:ro", f"{volume}:/index"]
    first = McpContainer(image, mounts, {"SYNC_INTERVAL": "2"})
    second = McpContainer(image, mounts, {"SYNC_INTERVAL": "2"})
    results: dict[str, list[dict]] = {"c1": [], "c2": []}
    try:
        first.handshake()
        second.handshake()

        def client(mcp: McpContainer, name: str) -> None:
            for i in range(12):
                text = f"# {name} note {i}\n\nMeeting {name}-{i} agreed on the lock-keeper rota for week {i}."
                results[name].append(mcp.tool("ingest_data", {"source": f"{name}/note-{i}", "content": text}))
                if i % 4 == 0:
                    _more_docs(docs, 10, f"{name}{i}")  # keep both schedulers writing

        threads = [threading.Thread(target=client, args=(first, "c1")),
                   threading.Thread(target=client, args=(second, "c2"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
        errors = [r for rs in results.values() for r in rs if r.get("isError")]
        assert errors == [], errors[:3]
        listing = first.tool("list_files")
        data = {s["source"] for s in listing["sources"]}
        assert data == {f"{n}/note-{i}" for n in ("c1", "c2") for i in range(12)}
        status = second.tool("status")
        assert "indexError" not in status and "consistencyWarning" not in status.get("index", {}), status
    finally:
        first.close()
        second.close()
    assert "index_corrupt" not in first.err_text() + second.err_text()


def test_a_host_sync_beside_the_container_is_refused_and_breaks_nothing(image: str, docs: Path, volume: str) -> None:
    mounts = [f"{docs}:/docs:ro", f"{volume}:/index"]
    assert docker_run(image, "sync", mounts=mounts).returncode == 0
    where = subprocess.run([DOCKER, "volume", "inspect", volume, "--format", "{{.Mountpoint}}"],
                           capture_output=True, text=True, check=True).stdout.strip()
    env = {**os.environ, "BASE_DIR": str(docs), "DB_PATH": where, "PYTHONPATH": str(ROOT)}
    host = subprocess.run([sys.executable, "-m", "appliance", "sync", "--json"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert host.returncode == 1, host.stdout[-2000:]
    error = json.loads(host.stdout)["error"]
    assert error["code"] == "roots_changed" and "/docs" in error["message"] and str(docs) in error["message"]
    (docs / "after-host.md").write_text("# Afterwards\n\nThe ferry timetable changed in spring.\n")
    again = docker_run(image, "sync", "--json", mounts=mounts)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert json.loads(again.stdout)["added"] == 1
    hits = json.loads(docker_run(image, "query", "ferry timetable spring", "--json", mounts=mounts).stdout)
    assert hits["results"][0]["source"] == "/docs/after-host.md"


def test_a_sync_container_beside_a_serving_one_is_run_by_the_warm_server(image: str, docs: Path,
                                                                          volume: str) -> None:
    mounts = [f"{docs}:/docs:ro", f"{volume}:/index"]
    env = {"SYNC_INTERVAL": "0"}  # the same settings in both containers; no scheduler beside
    server = McpContainer(image, mounts, env)
    try:
        server.handshake()
        where = Path(subprocess.run([DOCKER, "volume", "inspect", volume, "--format", "{{.Mountpoint}}"],
                                    capture_output=True, text=True, check=True).stdout.strip())
        deadline = time.monotonic() + 120
        while not (where / ".sync.sock").exists():
            assert time.monotonic() < deadline, "the warm server never took sync requests"
            time.sleep(0.5)
        (docs / "handoff.md").write_text("# Hand-off\n\nThe weir keeper oils the sluice chains on Fridays.\n")
        done = docker_run(image, "sync", mounts=mounts, env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "(run by the warm server on this index)" in done.stderr
        hits = server.tool("query_documents", {"query": "who oils the sluice chains", "topK": 1})
        assert hits["results"][0]["displayPath"] == "handoff.md"
        here = docker_run(image, "sync", "--here", "--json", mounts=mounts, env=env)
        assert here.returncode == 0 and "run by the warm server" not in here.stderr
        assert json.loads(here.stdout)["added"] == 0
    finally:
        server.close()
    assert "index_corrupt" not in server.err_text()
