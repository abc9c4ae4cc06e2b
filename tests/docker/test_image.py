"""The image, run the way an operator runs it: no network, read-only root, no capabilities, non-root.

Built by `make image` beforehand (scripts/docker_ci.sh does both); these tests build nothing.
"""
from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.docker.conftest import DOCKER

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HARDENED = ["--network", "none", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--user", "1000:1000"]


def docker_run(image: str, *args: str, mounts: list[str] = (), env: dict[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [DOCKER, "run", "--rm", "--pull", "never", *HARDENED]
    for m in mounts:
        cmd += ["-v", m]
    for k, v in (env or {}).items():
        cmd += ["-e", f"{k}={v}"]
    return subprocess.run([*cmd, image, *args], capture_output=True, text=True, timeout=timeout)


class McpContainer:
    """`docker run -i` in stdio mode, spoken to with raw JSON-RPC lines."""

    def __init__(self, image: str, mounts: list[str], env: dict[str, str] | None = None) -> None:
        self.name = f"minirag-test-{uuid.uuid4().hex[:10]}"
        cmd = [DOCKER, "run", "-i", "--rm", "--pull", "never", "--name", self.name, *HARDENED]
        for m in mounts:
            cmd += ["-v", m]
        for k, v in (env or {}).items():
            cmd += ["-e", f"{k}={v}"]
        self.started = time.monotonic()
        self.proc = subprocess.Popen([*cmd, image], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.junk: list[str] = []
        self.stderr: list[str] = []
        self._next_id = 0
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
                assert msg.get("jsonrpc") == "2.0"
                self.lines.put(msg)
            except (ValueError, AssertionError):
                self.junk.append(line)

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 120) -> dict[str, Any]:
        self._next_id += 1
        rid = self._next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.lines.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if msg.get("id") == rid:
                return msg
        raise AssertionError(f"no answer to {method} within {timeout} s; stderr:\n{self.err_text()[-3000:]}")

    def send(self, msg: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def initialize(self) -> dict[str, Any]:
        out = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                          "clientInfo": {"name": "docker-test", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return out

    def handshake(self) -> dict[str, Any]:
        """initialize, then tools/list as clients do: the server warms up, and the scheduler starts after it."""
        out = self.initialize()
        self.request("tools/list")
        return out

    def tool(self, name: str, arguments: dict[str, Any] | None = None, timeout: float = 180) -> dict[str, Any]:
        result = self.request("tools/call", {"name": name, "arguments": arguments or {}}, timeout)["result"]
        data = result.get("structuredContent")
        if data is None:
            data = json.loads(result["content"][0]["text"])
        return data | ({"isError": True} if result.get("isError") else {})

    def close(self, timeout: float = 60) -> int:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            subprocess.run([DOCKER, "kill", self.name], capture_output=True)
            raise

    def err_text(self) -> str:
        return "".join(self.stderr)


COLD_QUERY = ("how often should solar panels be cleaned", "/docs/solar-panel-maintenance.md")


def cold_start(image: str, mounts: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Seconds from `docker run` to the answers of initialize, tools/list and a first query_documents
    (sent at once, over an index synced beforehand: the model is still loading)."""
    mcp = McpContainer(image, mounts, env)
    try:
        init = mcp.initialize()
        assert init["result"]["serverInfo"]["name"] == "minirag", init
        figures = {"initialize": time.monotonic() - mcp.started}
        assert len(mcp.request("tools/list")["result"]["tools"]) == 14
        figures["toolsList"] = time.monotonic() - mcp.started
        hits = mcp.tool("query_documents", {"query": COLD_QUERY[0], "topK": 3})
        figures["firstQuery"] = time.monotonic() - mcp.started
        assert _paths(hits)[0] == COLD_QUERY[1], hits
    finally:
        code = mcp.close()
    assert code == 0, mcp.err_text()[-2000:]
    assert mcp.junk == [], f"non-MCP output on stdout: {mcp.junk[:5]}"
    return {key: round(value, 2) for key, value in figures.items()}


def _wait_sync(mcp: McpContainer, job: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = mcp.tool("sync_status", {"jobId": job["jobId"]})
        if state.get("phase") in ("succeeded", "failed"):
            return state
        time.sleep(1)
    raise AssertionError(f"sync job did not finish in {timeout} s: {state}")


def _paths(hits: dict[str, Any]) -> list[str]:
    return [h.get("filePath") or h.get("source") or h.get("displayPath") for h in hits["results"]]


def test_mcp_session_over_stdio(image: str, docs: Path, volume: str) -> None:
    """initialize, sync_start + sync_status, English and Russian queries, read_file; stdout is only MCP."""
    mcp = McpContainer(image, [f"{docs}:/docs:ro", f"{volume}:/index"], {"SYNC_INTERVAL": "0"})
    try:
        init = mcp.initialize()
        assert init["result"]["serverInfo"]["name"] == "minirag"
        job = mcp.tool("sync_start")
        assert "jobId" in job, job
        final = _wait_sync(mcp, job)
        assert final["phase"] == "succeeded", final
        en = mcp.tool("query_documents", {"query": "how often should solar panels be cleaned", "topK": 3})
        assert _paths(en)[0] == "/docs/solar-panel-maintenance.md", en
        ru = mcp.tool("query_documents", {"query": "сколько минут варить пельмени", "topK": 3})
        assert _paths(ru)[0] == "/docs/pelmeni.html", ru
        doc = mcp.tool("read_file", {"filePath": "/docs/kaffeemaschine-entkalken.md"})
        assert "Essig" in doc["content"]
    finally:
        code = mcp.close()
    assert code == 0, mcp.err_text()[-2000:]
    assert mcp.junk == [], f"non-MCP output on stdout: {mcp.junk[:5]}"


def test_cold_start_answers_the_handshake_and_a_first_query(image: str, docs: Path, volume: str) -> None:
    """The real server answers from the first message; a query sent right after the handshake gets
    its hits (scripts/bench_image.py times this; the bound here is for correctness only)."""
    mounts = [f"{docs}:/docs:ro", f"{volume}:/index"]
    assert docker_run(image, "sync", mounts=mounts).returncode == 0
    figures = cold_start(image, mounts)
    print(f"docker run -> initialize / tools/list / first query: {figures} (load {os.getloadavg()[0]:.1f})")
    assert figures["firstQuery"] < 120


def test_scheduled_sync_finds_a_new_file(image: str, docs: Path, volume: str) -> None:
    """With SYNC_INTERVAL=5 a file added to /docs becomes searchable; SIGTERM stops cleanly."""
    mcp = McpContainer(image, [f"{docs}:/docs:ro", f"{volume}:/index"], {"SYNC_INTERVAL": "5"})
    try:
        mcp.handshake()
        marker = "Zanzibar-7 quartz oscillator calibration"
        (docs / "new-note.md").write_text(f"# Lab note\n\nThe {marker} drifts by 3 ppm per year.\n")
        landed = time.monotonic()
        found = False
        while time.monotonic() - landed < 240 and not found:
            hits = mcp.tool("query_documents", {"query": marker, "topK": 3})
            found = not hits.get("isError") and "/docs/new-note.md" in _paths(hits)
            if not found:
                time.sleep(2)
        assert found, mcp.err_text()[-3000:]
        status = mcp.tool("status")  # the new file can be found while the first sync is still writing the rest
        deadline = time.monotonic() + 180
        while status["index"]["sourceCount"] < 6 and time.monotonic() < deadline:
            time.sleep(2)
            status = mcp.tool("status")
        assert status["index"]["sourceCount"] >= 6, status
        # the first sync starts at once on an empty index and may still be finishing (its writes are
        # visible before it ends): the stop below is for an idle scheduler, whose sync was logged
        while (status["syncRunning"] is not None or status["lastSync"] is None) and time.monotonic() < deadline:
            time.sleep(1)
            status = mcp.tool("status")
        assert status["syncRunning"] is None and status["lastSync"] is not None, status
        stop_started = time.monotonic()
        subprocess.run([DOCKER, "stop", "-t", "30", mcp.name], capture_output=True, timeout=60)
        code = mcp.proc.wait(timeout=60)
        assert time.monotonic() - stop_started < 30
    finally:
        if mcp.proc.poll() is None:
            mcp.close()
    assert code in (0, 143), mcp.err_text()[-2000:]
    assert mcp.junk == []
    assert "scheduled sync:" in mcp.err_text()


def test_make_sync_then_query(image: str, docs: Path, volume: str) -> None:
    """`make sync DOCS=... INDEX=...` (= `IMAGE sync`: one reconcile, exit), then a one-shot Russian query."""
    run = subprocess.run(["make", "-s", "sync", f"DOCS={docs}", f"INDEX={volume}", f"IMAGE={image}",
                          f"DOCKER={DOCKER}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "seen 5: added 5" in run.stdout
    out = docker_run(image, "query", "Политика резервного копирования", "--json",
                     mounts=[f"{docs}:/docs:ro", f"{volume}:/index"])
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["results"][0]["filePath"] == "/docs/backup-policy.md"


def test_a_sync_in_rounds_runs_in_the_hardened_container(image: str, docs: Path, volume: str) -> None:
    """SYNC_ROUND_FILES=2: five files in three rounds, each a child process with its own conversion worker
    (pelmeni.html needs one), under --read-only, a tmpfs /tmp and no capabilities."""
    mounts = [f"{docs}:/docs:ro", f"{volume}:/index"]
    run = docker_run(image, "sync", "--json", mounts=mounts, env={"SYNC_ROUND_FILES": "2"}, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["added"] == 5 and not report["failed"], report
    out = docker_run(image, "query", "тесто для пельменей", "--json", mounts=mounts)
    assert out.returncode == 0, out.stderr
    assert "/docs/pelmeni.html" in [hit["filePath"] for hit in json.loads(out.stdout)["results"]]


def test_the_server_allocates_with_jemalloc_and_a_syncs_rounds_with_glibc(image: str) -> None:
    """The image preloads jemalloc (a fifth of a 1M-chunk query's CPU was glibc's malloc); a sync's rounds start
    their fork server without it and index under glibc's bounded arenas (appliance/platform/native_memory.py)."""
    probe = ("from appliance.platform.native_memory import allocator\n"
             "from appliance.sync import rounds\n"
             "print(allocator())\n"
             "with rounds._fork_server_environment(None):\n"
             "    pool = rounds._context().Pool(1)\n"
             "print(pool.apply(allocator))\n"
             "pool.close()\n")
    run = subprocess.run([DOCKER, "run", "--rm", "--pull", "never", *HARDENED, "--entrypoint", "python3", image,
                          "-c", probe], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["jemalloc", "glibc"], run.stdout + run.stderr[-2000:]


BAD_INPUTS = {
    "missing-docs": ([], "no documents are mounted at /docs"),
    "empty-docs": (["{empty}:/docs:ro"], "/docs is empty: nothing to index yet"),
    "index-not-writable": (["{docs}:/docs:ro", "{rootdir}:/index"], "is not writable by uid 1000"),
    "no-model": (["{docs}:/docs:ro", "{empty}:/models"], "No model manifest found"),
}


def test_bad_input_gives_one_clear_message(image: str, docs: Path, tmp_path: Path) -> None:
    """Each misconfiguration: one message on stderr, status still answers over MCP, no crash loop."""
    empty = tmp_path / "empty"
    rootdir = tmp_path / "rootdir"
    empty.mkdir()
    rootdir.mkdir(mode=0o755)  # owned by root: uid 1000 cannot write
    fill = {"empty": empty, "docs": docs, "rootdir": rootdir}
    running = {}
    for case, (mounts, _expected) in BAD_INPUTS.items():
        mcp = McpContainer(image, [m.format(**fill) for m in mounts], {"SYNC_INTERVAL": "3"})
        running[case] = mcp
    try:
        for case, mcp in running.items():
            mcp.handshake()
            status = mcp.tool("status")
            assert "version" in status, (case, status)
        time.sleep(15)  # several scheduler rounds
    finally:
        codes = {case: mcp.close() for case, mcp in running.items()}
    for case, (_mounts, expected) in BAD_INPUTS.items():
        err = running[case].err_text()
        assert codes[case] == 0, (case, err[-2000:])
        assert err.count(expected) == 1, f"{case}: expected one {expected!r} in stderr:\n{err[-3000:]}"
        assert "Traceback" not in err, (case, err[-3000:])
        assert "gave up" not in err and "exited:" not in err, (case, err[-3000:])
        assert running[case].junk == []


def test_sync_without_docs_refuses(image: str, volume: str) -> None:
    run = docker_run(image, "sync", mounts=[f"{volume}:/index"])
    assert run.returncode == 1
    assert run.stderr.startswith("error: no documents are mounted at /docs"), run.stderr
    status = docker_run(image, "status", mounts=[f"{volume}:/index"])
    assert status.returncode == 0 and json.loads(status.stdout)["version"]


def test_a_read_only_root_without_a_writable_tmp_is_named_not_a_traceback(image: str, docs: Path,
                                                                          volume: str) -> None:
    """`--read-only` without `--tmpfs /tmp`: a sync, the stdio server and the daemon each refuse at once with
    the fix; the sync used to die inside its conversion pool with "No usable temporary directory found"."""
    bare = [DOCKER, "run", "--rm", "-i", "--pull", "never", "--network", "none", "--read-only",
            "-v", f"{docs}:/docs:ro", "-v", f"{volume}:/index", image]
    for mode in ("sync", "serve", "daemon"):
        run = subprocess.run([*bare, mode], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert run.returncode == 2, (mode, run.stderr[-2000:])
        assert run.stderr.startswith("error: no writable temporary directory"), (mode, run.stderr[-2000:])
        assert "--tmpfs /tmp" in run.stderr and "Traceback" not in run.stderr, (mode, run.stderr[-2000:])
    status = docker_run(image, "status", mounts=[f"{volume}:/index"])  # the hardened run, with its tmpfs, works
    assert status.returncode == 0 and json.loads(status.stdout)["version"]


def test_daemon_refuses_public_address_without_token(image: str) -> None:
    run = docker_run(image, "daemon", timeout=120)
    assert run.returncode == 2
    assert "without MCP_AUTH_TOKEN" in run.stderr


def test_daemon_checks_bearer_token(image: str, docs: Path) -> None:
    """Daemon mode: MCP over HTTP; 401 without the token, an MCP answer with it."""
    name = f"minirag-daemon-{uuid.uuid4().hex[:8]}"
    token = "t" * 32
    subprocess.run([DOCKER, "run", "-d", "--rm", "--pull", "never", "--name", name, *HARDENED,
                    "-e", f"MCP_AUTH_TOKEN={token}", "-e", "SYNC_INTERVAL=0", "-v", f"{docs}:/docs:ro",
                    image, "daemon"], check=True, capture_output=True, timeout=60)
    probe = (
        "import sys, urllib.request, urllib.error, time\n"
        "body=b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\","
        "\"capabilities\":{},\"clientInfo\":{\"name\":\"p\",\"version\":\"1\"}}}'\n"
        "def post(auth):\n"
        "    h={'Content-Type':'application/json','Accept':'application/json, text/event-stream'}\n"
        "    if auth: h['Authorization']=auth\n"
        "    try:\n"
        "        r=urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:8080/mcp',body,h),timeout=30)\n"
        "        return r.status, r.read().decode()\n"
        "    except urllib.error.HTTPError as e: return e.code, e.read().decode()\n"
        "for _ in range(120):\n"
        "    try: print(post(None)[0]); break\n"
        "    except OSError: time.sleep(1)\n"
        "print(post('Bearer wrong-token-wrong-token')[0])\n"
        f"s,b=post('Bearer {token}'); print(s); print('serverInfo' in b)\n"
    )
    try:
        out = subprocess.run([DOCKER, "exec", name, "python3", "-c", probe], capture_output=True, text=True,
                             timeout=180)
        assert out.stdout.split() == ["401", "401", "200", "True"], (out.stdout, out.stderr)
        health = subprocess.run([DOCKER, "exec", name, "python3", "-m", "appliance.adapters.entrypoint", "healthcheck"],
                                capture_output=True, text=True, timeout=120)
        assert health.returncode == 0, health.stderr
    finally:
        subprocess.run([DOCKER, "stop", "-t", "20", name], capture_output=True, timeout=60)


def test_save_rmi_load_status(image: str, tmp_path: Path) -> None:
    """The air-gap bundle: save, remove the image, load it back, run status. (Runs last.)"""
    bundle = tmp_path / "minirag-image.tar.gz"
    saved = subprocess.run([str(ROOT / "scripts/image_bundle.sh"), "save", image, str(bundle)],
                           capture_output=True, text=True, timeout=600)
    assert saved.returncode == 0, saved.stderr
    assert (tmp_path / "LOAD.txt").is_file() and (tmp_path / "minirag-image.tar.gz.sha256").is_file()
    subprocess.run([DOCKER, "rmi", image], check=True, capture_output=True, timeout=120)
    loaded = subprocess.run([str(ROOT / "scripts/image_bundle.sh"), "load", image, str(bundle)],
                            capture_output=True, text=True, timeout=600)
    assert loaded.returncode == 0, loaded.stderr
    status = docker_run(image, "status")
    assert status.returncode == 0 and json.loads(status.stdout)["model"]["baked"] is True
