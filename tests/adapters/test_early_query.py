"""The stdio front answers a first query_documents from the warming Appliance, before fastmcp is up.

Exactly one reply per request reaches the client, whichever side answers first, and the
front's answer is the one the real server gives.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from typing import Any

import anyio
import pytest

from appliance.config import read_environment
from appliance.runtime import Runtime, early_tool_call
from appliance.stdio_front import SNAPSHOT, Front
from tests.adapters.conftest import MINIRAG
from tests.adapters.test_stdio_front import Wire, _frame

QUERY = {"name": "query_documents", "arguments": {"query": "ERR_ZORBLATT_7741 морозы", "topK": 3}}


@pytest.fixture()
def snapshot() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text(encoding="utf-8"))


def _handshake(wire: Wire, snapshot: dict[str, Any]) -> None:
    wire.send(_frame(1, "initialize", {"protocolVersion": next(iter(snapshot["initialize"]))}))
    assert wire.reply()["id"] == 1


def _tools(gate: threading.Event | None = None, fail: bool = False):  # type: ignore[no-untyped-def]
    def tools(name: Any, arguments: Any):  # type: ignore[no-untyped-def]
        if name != "query_documents":
            return None

        def run() -> dict[str, Any]:
            if gate is not None:
                gate.wait(10)
            if fail:
                raise RuntimeError("no index")
            return {"content": [], "structuredContent": {"from": "front"}, "isError": False}
        return run
    return tools


def _serve(front: Front, ids: list[Any]) -> list[str]:
    """The real server's side: read the queue, answer each id in `ids`; returns the lines it saw."""
    async def server() -> list[str]:
        stdin, stdout = front.attach()
        seen = [line async for line in stdin]
        for id_ in ids:
            await stdout.write(json.dumps({"jsonrpc": "2.0", "id": id_, "result": {"from": "server"}}))
        return seen
    return anyio.run(server)


@pytest.mark.parametrize("params", [QUERY, {**QUERY, "_meta": {"progressToken": "p"}}])
def test_the_front_answers_a_query_and_drops_the_servers_reply(snapshot: dict[str, Any],
                                                              params: dict[str, Any]) -> None:
    wire = Wire()
    front = Front(lambda: "i", snapshot, wire=wire.front_side, tools=_tools())
    _handshake(wire, snapshot)
    wire.send(_frame(2, "tools/call", params))
    reply = wire.reply()
    assert reply["id"] == 2 and reply["result"]["structuredContent"] == {"from": "front"}
    assert not front.handed_over.is_set()
    wire.send(_frame(3, "logging/setLevel", {"level": "info"}))  # not the front's: from here the real server answers everything
    assert front.handed_over.wait(5)
    wire.close_input()
    seen = _serve(front, [2, 3])
    assert [json.loads(line)["id"] for line in seen] == [1, 2, 3]  # the real server saw the call too
    assert wire.reply() == {"jsonrpc": "2.0", "id": 3, "result": {"from": "server"}}
    os.close(wire.front_side[1].fileno())
    assert wire.replies.readline() == b""  # no second reply to id 2


def test_when_the_server_answers_first_the_fronts_late_answer_is_dropped(snapshot: dict[str, Any]) -> None:
    wire = Wire()
    gate = threading.Event()
    front = Front(lambda: "i", snapshot, wire=wire.front_side, tools=_tools(gate))
    _handshake(wire, snapshot)
    wire.send(_frame(2, "tools/call", QUERY))
    wire.close_input()
    _serve(front, [2])
    assert wire.reply()["result"] == {"from": "server"}
    gate.set()
    time.sleep(0.2)
    os.close(wire.front_side[1].fileno())
    assert wire.replies.readline() == b""


def test_a_failed_early_call_is_left_to_the_server(snapshot: dict[str, Any]) -> None:
    wire = Wire()
    front = Front(lambda: "i", snapshot, wire=wire.front_side, tools=_tools(fail=True))
    _handshake(wire, snapshot)
    wire.send(_frame(2, "tools/call", QUERY))
    assert front.handed_over.wait(5)  # fastmcp may come now
    wire.close_input()
    _serve(front, [2])
    assert wire.reply() == {"jsonrpc": "2.0", "id": 2, "result": {"from": "server"}}


@pytest.mark.parametrize("params", [
    {"name": "status", "arguments": {}},
    {**QUERY, "_meta": {"progressToken": 1, "io.modelcontextprotocol/related-task": {"taskId": "t"}}},
    {**QUERY, "_meta": "x"},
    {**QUERY, "task": {"ttl": 1000}},
])
def test_other_calls_hand_over_to_the_server(snapshot: dict[str, Any], params: dict[str, Any]) -> None:
    wire = Wire()
    front = Front(lambda: "i", snapshot, wire=wire.front_side, tools=_tools())
    _handshake(wire, snapshot)
    wire.send(_frame(2, "tools/call", params))
    wire.send(_frame(3, "tools/list"))  # after a hand-over the front answers nothing more
    wire.close_input()
    assert front.handed_over.wait(5)
    assert len(_serve(front, [])) == 3
    os.close(wire.front_side[1].fileno())
    assert wire.replies.readline() == b""


def test_a_call_before_initialize_is_not_the_fronts(snapshot: dict[str, Any]) -> None:
    wire = Wire()
    front = Front(lambda: "i", snapshot, wire=wire.front_side, tools=_tools())
    wire.send(_frame(1, "tools/call", QUERY))
    wire.close_input()
    assert len(_serve(front, [])) == 1
    os.close(wire.front_side[1].fileno())
    assert wire.replies.readline() == b""


@pytest.mark.parametrize("arguments", [
    {}, {"query": ""}, {"query": "x" * 4001}, {"query": 5}, {"query": "x", "topK": "3"}, {"query": "x", "topK": 0},
    {"query": "x", "topK": 101}, {"query": "x", "topK": True}, {"query": "x", "topK": 3.0},
    {"query": "x", "scope": ""}, {"query": "x", "docClass": "y" * 101}, {"query": "x", "extra": 1}, [],
])
def test_only_arguments_the_schema_takes_as_they_are_are_answered_early(arguments: Any) -> None:
    runtime = Runtime(read_environment({}))
    assert early_tool_call(runtime, "query_documents", arguments) is None
    assert early_tool_call(runtime, "query_documents", {"query": "x", "topK": 100, "scope": None,
                                                        "docClass": "memo"}) is not None
    assert early_tool_call(runtime, "list_files", {}) is None


class RawStdio:
    """`minirag serve` over raw JSON-RPC lines, recording every frame it sends."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([MINIRAG, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
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

    def close(self) -> list[dict[str, Any]]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.close()
        self.frames += [json.loads(line) for line in self.proc.stdout.read().splitlines()]
        assert self.proc.wait(60) == 0
        return self.frames


@pytest.mark.parametrize("fast", ["1", "0"])
def test_the_first_query_gets_the_real_servers_answer_once(server_env: dict[str, str], fast: str) -> None:
    server = RawStdio(server_env | {"MCP_FAST_HANDSHAKE": fast})
    try:
        server.send(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "clientInfo": {"name": "t", "version": "0"}})
        server.reply(1)
        server.send(None, "notifications/initialized")
        server.send(2, "tools/call", QUERY)  # cold: the front answers it (when on)
        first = server.reply(2)["result"]
        server.send(3, "logging/setLevel", {"level": "info"})  # only the real server answers this
        server.reply(3)
        server.send(4, "tools/call", QUERY)  # answered by fastmcp
        second = server.reply(4)["result"]
    finally:
        frames = server.close()
    assert not first["isError"] and first["structuredContent"]["results"], first
    assert first["structuredContent"]["results"][0]["displayPath"] == "guide/errors.md"
    assert json.loads(first["content"][0]["text"]) == first["structuredContent"]
    assert first == second
    ids = [f["id"] for f in frames if "id" in f]
    assert sorted(ids) == [1, 2, 3, 4], ids


def test_the_early_bounds_are_the_tools_own(snapshot: dict[str, Any]) -> None:
    """The front's argument check may only be stricter than the recorded schema, never looser."""
    from appliance.runtime import _QUERY_ARGUMENTS

    tool = next(t for t in snapshot["tools/list"]["tools"] if t["name"] == "query_documents")
    properties = tool["inputSchema"]["properties"]
    assert set(_QUERY_ARGUMENTS) == set(properties)
    for key, (kind, low, high) in _QUERY_ARGUMENTS.items():
        schema = next((s for s in properties[key].get("anyOf", [properties[key]]) if s["type"] != "null"))
        if kind is str:
            assert schema["type"] == "string" and (schema["minLength"], schema["maxLength"]) == (low, high), key
        else:
            assert schema["type"] == "integer" and (schema["minimum"], schema["maximum"]) == (low, high), key
