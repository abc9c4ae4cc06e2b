"""Raw JSON-RPC over `minirag serve`'s stdio, once per protocol revision the installed SDK serves.

The handshake revisions are reached through `initialize`; the 2026-07-28
revision has no handshake and is reached by per-request `_meta` envelopes
(`server/discover` first). A dependency change that silently drops one of them
fails here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_PROTOCOL_VERSION, MODERN_PROTOCOL_VERSIONS

MINIRAG = str(Path(sys.executable).with_name("minirag"))
TOOL_COUNT = 14
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
INFO_KEY = "io.modelcontextprotocol/clientInfo"


class RawServer:
    """`minirag serve` driven line by line; every stdout line must be a JSON-RPC frame."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([MINIRAG, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> int:
        frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            frame["params"] = params
        if not notify:
            self.next_id += 1
            frame["id"] = self.next_id
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(frame) + "\n")
        self.proc.stdin.flush()
        return self.next_id

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        wanted = self.send(method, params)
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            assert line, f"server closed stdout while waiting for {method}"
            frame = json.loads(line)  # anything that is not JSON on stdout breaks clients
            if frame.get("id") == wanted:
                return frame

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    # A broken BASE_DIRS keeps these tests about the protocol: status answers without the index or the model.
    base = {k: v for k, v in os.environ.items() if k not in ("BASE_DIR", "MODEL_NAME", "MCP_INSTRUCTIONS_EXTRA")}
    return base | {"BASE_DIRS": "not json", "DB_PATH": str(tmp_path / "db")}


def _envelope(version: str) -> dict[str, Any]:
    return {VERSION_KEY: version, CAPS_KEY: {}, INFO_KEY: {"name": "raw-test", "version": "0"}}


def _check_tools_and_status(listing: dict[str, Any], called: dict[str, Any]) -> None:
    tools = listing["result"]["tools"]
    assert len(tools) == TOOL_COUNT
    assert all(t["outputSchema"]["type"] == "object" and "annotations" in t for t in tools)
    result = called["result"]
    assert not result.get("isError")
    assert result["structuredContent"]["configError"]["code"] == "config_error"
    assert result["structuredContent"]["version"]


def test_the_sdk_still_offers_both_eras() -> None:
    assert "2025-11-25" in HANDSHAKE_PROTOCOL_VERSIONS and LATEST_PROTOCOL_VERSION in MODERN_PROTOCOL_VERSIONS


@pytest.mark.slow  # a `minirag serve` subprocess
@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
def test_handshake_revision_end_to_end(version: str, env: dict[str, str]) -> None:
    server = RawServer(env)
    try:
        started = time.monotonic()
        init = server.request("initialize", {"protocolVersion": version, "capabilities": {},
                                             "clientInfo": {"name": "raw-test", "version": "0"}})
        assert time.monotonic() - started < 30  # a correctness bound; scripts/bench_mcp.py measures speed
        assert init["result"]["protocolVersion"] == version
        assert "query_documents" in init["result"]["instructions"]
        server.send("notifications/initialized", notify=True)
        listing = server.request("tools/list", {})
        called = server.request("tools/call", {"name": "status", "arguments": {}})
        _check_tools_and_status(listing, called)
    finally:
        server.close()


@pytest.mark.slow  # a `minirag serve` subprocess
@pytest.mark.parametrize("version", MODERN_PROTOCOL_VERSIONS)
def test_modern_revision_end_to_end(version: str, env: dict[str, str]) -> None:
    server = RawServer(env)
    try:
        discovered = server.request("server/discover", {"_meta": _envelope(version)})
        assert version in discovered["result"]["supportedVersions"]
        assert "query_documents" in discovered["result"]["instructions"]
        listing = server.request("tools/list", {"_meta": _envelope(version)})
        called = server.request("tools/call", {"name": "status", "arguments": {}, "_meta": _envelope(version)})
        _check_tools_and_status(listing, called)
    finally:
        server.close()


@pytest.mark.slow  # a `minirag serve` subprocess
def test_an_unknown_revision_gets_a_counter_offer(env: dict[str, str]) -> None:
    server = RawServer(env)
    try:
        init = server.request("initialize", {"protocolVersion": "1999-01-01", "capabilities": {},
                                             "clientInfo": {"name": "raw-test", "version": "0"}})
        assert init["result"]["protocolVersion"] in HANDSHAKE_PROTOCOL_VERSIONS
    finally:
        server.close()


@pytest.mark.slow  # a `minirag serve` subprocess
def test_a_tool_error_is_a_result_not_a_protocol_error(env: dict[str, str]) -> None:
    server = RawServer(env)
    try:
        server.request("initialize", {"protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1], "capabilities": {},
                                      "clientInfo": {"name": "raw-test", "version": "0"}})
        server.send("notifications/initialized", notify=True)
        called = server.request("tools/call", {"name": "query_documents", "arguments": {"query": 42, "topK": "many"}})
        assert called["result"]["isError"] is True
        assert called["result"]["structuredContent"]["error"]["code"] == "invalid_argument"
        called = server.request("tools/call", {"name": "query_documents", "arguments": {"query": "x"}})
        assert called["result"]["structuredContent"]["error"]["code"] == "config_error"
    finally:
        server.close()
