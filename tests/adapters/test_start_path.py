"""`minirag serve` on stdio: the real server answers every message from the first, the tool
declarations load none of the index, model or conversion libraries, and the warm-up (started
once the client has listed the tools) loads them without waiting for a tool call.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.conftest import MINIRAG

ROOT = Path(__file__).resolve().parents[2]
QUERY = {"name": "query_documents", "arguments": {"query": "ERR_ZORBLATT_7741 морозы", "topK": 3}}
HEAVY = ("lancedb", "fastembed", "markitdown")

# `minirag serve` as it runs, plus one tool that reports what the process has imported so far;
# argv[1] == "cold" turns the warm-up off, so only what the protocol and the tools load is seen.
PROBE = f"""
import sys
from appliance.adapters import mcp_server as server
from appliance.config import read_environment
from appliance.adapters.runtime import Runtime

if sys.argv[1] == "cold":
    Runtime.warm_up = lambda self: None
declare = server.create_server

def create_server(runtime):
    mcp = declare(runtime)

    @mcp.tool
    def loaded() -> dict:
        return {{"heavy": [m for m in {HEAVY!r} if m in sys.modules], "warmed": runtime.warmed.is_set()}}
    return mcp

server.create_server = create_server
server.serve_stdio(read_environment(), {{}})
"""


def _frame(id_: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if id_ is not None:
        frame["id"] = id_
    return (json.dumps(frame) + "\n").encode()


class RawStdio:
    """A server process over raw JSON-RPC lines, recording every frame it sends (each must be JSON)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, cwd=ROOT)
        self.frames: list[dict[str, Any]] = []

    def send(self, id_: Any, method: str, params: dict[str, Any] | None = None) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(_frame(id_, method, params))
        self.proc.stdin.flush()

    def reply(self, id_: Any) -> dict[str, Any]:
        assert self.proc.stdout
        while True:
            line = self.proc.stdout.readline()
            assert line, "the server closed stdout"
            self.frames.append(json.loads(line))
            if self.frames[-1].get("id") == id_:
                return self.frames[-1]

    def call(self, id_: Any, params: dict[str, Any]) -> dict[str, Any]:
        self.send(id_, "tools/call", params)
        result = self.reply(id_)["result"]
        assert not result["isError"], result
        return result

    def handshake(self) -> None:
        self.send(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "t", "version": "0"}})
        assert self.reply(1)["result"]["serverInfo"]["name"] == "minirag"
        self.send(None, "notifications/initialized")

    def close(self) -> list[dict[str, Any]]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.close()
        self.frames += [json.loads(line) for line in self.proc.stdout.read().splitlines()]
        assert self.proc.wait(60) == 0
        return self.frames


@pytest.mark.slow  # a server subprocess, over an index synced by `minirag sync`
def test_declaring_and_listing_the_tools_loads_no_index_model_or_converter_library(
        server_env: dict[str, str]) -> None:
    server = RawStdio([sys.executable, "-c", PROBE, "cold"], server_env)
    try:
        server.handshake()
        server.send(2, "tools/list")
        assert "query_documents" in {t["name"] for t in server.reply(2)["result"]["tools"]}
        assert server.call(3, {"name": "loaded"})["structuredContent"] == {"heavy": [], "warmed": False}
        server.call(4, QUERY)  # the first tool that needs the index and the model loads them
        loaded = server.call(5, {"name": "loaded"})["structuredContent"]
    finally:
        server.close()
    assert loaded["heavy"] == ["lancedb", "fastembed"]  # markitdown waits for a conversion


@pytest.mark.slow  # a server subprocess
def test_the_warm_up_loads_the_index_and_model_without_a_tool_call(server_env: dict[str, str]) -> None:
    server = RawStdio([sys.executable, "-c", PROBE, "warm"], server_env)
    try:
        server.handshake()
        server.send(2, "tools/list")
        server.reply(2)
        deadline = time.monotonic() + 120
        loaded: dict[str, Any] = {}
        for n in range(10, 10**6):
            loaded = server.call(n, {"name": "loaded"})["structuredContent"]
            if loaded["warmed"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        server.close()
    assert loaded == {"heavy": ["lancedb", "fastembed"], "warmed": True}


@pytest.mark.slow  # a `minirag serve` subprocess
def test_the_first_query_of_a_cold_server_is_answered_once(server_env: dict[str, str]) -> None:
    """Over real stdio with the real model: the query sent right after the handshake gets the
    same answer as a later one, and every request exactly one reply."""
    server = RawStdio([MINIRAG, "serve"], server_env)
    try:
        server.handshake()
        server.send(2, "tools/list")
        server.reply(2)
        first = server.call(3, QUERY)  # sent before the warm-up can have finished
        server.send(4, "ping")
        server.reply(4)
        second = server.call(5, QUERY)
    finally:
        frames = server.close()
    assert first["structuredContent"]["results"][0]["displayPath"] == "guide/errors.md", first
    assert json.loads(first["content"][0]["text"]) == first["structuredContent"]
    assert first == second
    ids = [f["id"] for f in frames if "id" in f]
    assert sorted(ids) == [1, 2, 3, 4, 5], ids


def test_each_tool_description_is_what_fastmcp_would_have_parsed_from_its_docstring() -> None:
    """server.py hands fastmcp each docstring as the description (griffe stays unloaded); that is only
    the same as fastmcp's own parse while no docstring has a section (Args:, Returns: ...) to split off."""
    import asyncio

    from fastmcp.utilities.docstring_parsing import ParsedDocstring, parse_docstring

    from appliance.adapters.mcp_server import Runtime, create_server
    from appliance.config import read_environment

    tools = asyncio.run(create_server(Runtime(read_environment({}))).list_tools())
    assert len(tools) == 14
    for tool in tools:
        def fn() -> None:
            pass
        fn.__doc__ = tool.description
        assert parse_docstring(fn) == ParsedDocstring(description=tool.description), tool.name


# The image's entrypoint on the host, with a supervisord whose only program records when it started.
ENTRYPOINT = """
import sys
from appliance.adapters import entrypoint
entrypoint.SCHEDULER_START_LIMIT_S = float(sys.argv[1])
sys.exit(entrypoint.main([]))
"""
SUPERVISOR_CONF = """[supervisord]
nodaemon=true
logfile=/dev/null
pidfile={dir}/supervisord.pid
[program:scheduler]
command=/bin/sh -c 'date +%%s.%%N > {dir}/started; exec sleep 600'
startsecs=0
stopasgroup=true
killasgroup=true
"""


def _entrypoint(server_env: dict[str, str], tmp_path: Path, limit: float) -> tuple[RawStdio, Path]:
    (tmp_path / "supervisord-stdio.conf").write_text(SUPERVISOR_CONF.format(dir=tmp_path))
    return (RawStdio([sys.executable, "-c", ENTRYPOINT, str(limit)],
                     server_env | {"MINIRAG_SUPERVISOR_DIR": str(tmp_path)}), tmp_path / "started")


def _wait_for(path: Path, seconds: float) -> float | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return float(path.read_text())
        time.sleep(0.05)
    return None


@pytest.mark.slow  # the entrypoint, a server and supervisord as subprocesses
def test_the_entrypoint_starts_the_scheduler_once_the_server_is_warm(server_env: dict[str, str],
                                                                      tmp_path: Path) -> None:
    """Not beside the server's first seconds (two cores: it slowed the handshake and the first answer),
    and not never: the server's warm-up tells the entrypoint, which starts supervisord then."""
    server, started = _entrypoint(server_env, tmp_path, limit=600)
    try:
        server.handshake()
        time.sleep(1.0)  # plenty for a supervisord that would start with the server
        assert not started.exists(), "the scheduler started before the server was warm"
        server.send(2, "tools/list")  # the end of the handshake: the warm-up starts
        server.reply(2)
        assert server.call(3, QUERY)["structuredContent"]["results"]
        at = _wait_for(started, 60)
        assert at is not None, "the warm server never started the scheduler"
    finally:
        frames = server.close()
    assert all(f.get("jsonrpc") == "2.0" for f in frames)  # stdout stayed the MCP wire
    pid_file = tmp_path / "supervisord.pid"
    assert not pid_file.exists() or not Path(f"/proc/{pid_file.read_text().strip()}").exists()


@pytest.mark.slow  # the entrypoint, a server and supervisord as subprocesses
def test_the_scheduler_starts_at_the_limit_when_no_client_lists_the_tools(server_env: dict[str, str],
                                                                         tmp_path: Path) -> None:
    server, started = _entrypoint(server_env, tmp_path, limit=1.0)
    try:
        server.handshake()  # no tools/list: the warm-up never starts
        assert _wait_for(started, 30) is not None, "the scheduler waited past its limit"
    finally:
        server.close()
