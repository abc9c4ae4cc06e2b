"""The stdio front: early answers from the recorded snapshot, then the real server behind it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from appliance.instructions import build_instructions
from appliance.stdio_front import SNAPSHOT, Front

ROOT = Path(__file__).resolve().parents[2]


def _frame(id_: int | str | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if id_ is not None:
        frame["id"] = id_
    return (json.dumps(frame) + "\n").encode()


class Wire:
    """A pipe pair standing in for the client: it writes requests and reads what the front sends."""

    def __init__(self) -> None:
        client_to_front, self._to_front = os.pipe()
        self._from_front, front_to_client = os.pipe()
        self.front_side = (os.fdopen(client_to_front, "rb"), os.fdopen(front_to_client, "wb"))
        self.replies = os.fdopen(self._from_front, "rb")

    def send(self, data: bytes) -> None:
        os.write(self._to_front, data)

    def close_input(self) -> None:
        os.close(self._to_front)

    def reply(self) -> dict[str, Any]:
        return json.loads(self.replies.readline())


def _drained(front: Front, wire: Wire) -> int:
    """How many lines the real server's side gets; then the front's output is closed (and must be empty)."""
    async def drain() -> int:
        stdin, _ = front.attach()
        return len([line async for line in stdin])

    count = anyio.run(drain)
    os.close(wire.front_side[1].fileno())
    return count


@pytest.fixture()
def snapshot() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text(encoding="utf-8"))


def test_handshake_is_answered_before_any_server_exists(snapshot: dict[str, Any]) -> None:
    wire = Wire()
    Front(lambda: build_instructions("note"), snapshot, wire=wire.front_side)
    version = next(iter(snapshot["initialize"]))
    wire.send(_frame(1, "initialize", {"protocolVersion": version, "capabilities": {},
                                       "clientInfo": {"name": "t", "version": "0"}}))
    init = wire.reply()
    assert init["id"] == 1 and init["result"]["protocolVersion"] == version
    assert init["result"]["instructions"] == build_instructions("note")
    wire.send(_frame(None, "notifications/initialized"))
    wire.send(_frame("list-1", "tools/list"))
    listing = wire.reply()
    assert listing["id"] == "list-1" and len(listing["result"]["tools"]) == 13


def test_prompts_resources_and_ping_are_answered_from_the_snapshot(snapshot: dict[str, Any]) -> None:
    """A client lists what the capabilities declare right after initialize; none of it waits for fastmcp."""
    wire = Wire()
    front = Front(lambda: "i", snapshot, wire=wire.front_side)
    version = next(iter(snapshot["initialize"]))
    wire.send(_frame(1, "initialize", {"protocolVersion": version}))
    assert wire.reply()["id"] == 1
    for n, method in enumerate(("prompts/list", "resources/list", "resources/templates/list", "ping"), start=2):
        wire.send(_frame(n, method))
        reply = wire.reply()
        assert reply["id"] == n and reply["result"] == snapshot.get(method, {}), method
    assert not front.handed_over.is_set()


def test_the_real_server_sees_every_line_and_its_duplicate_replies_are_dropped(snapshot: dict[str, Any]) -> None:
    wire = Wire()
    front = Front(lambda: "i", snapshot, wire=wire.front_side)
    version = next(iter(snapshot["initialize"]))
    sent = [_frame(1, "initialize", {"protocolVersion": version}), _frame(None, "notifications/initialized"),
            _frame(2, "tools/list"), _frame(3, "tools/call", {"name": "status"})]
    for line in sent:
        wire.send(line)
    assert [wire.reply()["id"], wire.reply()["id"]] == [1, 2]  # the front's own answers
    wire.close_input()

    async def real_server() -> list[str]:
        stdin, stdout = front.attach()
        seen = [line async for line in stdin]
        for id_ in (1, 2, 3, 2):  # the server answers all three; a repeated id 2 is not the front's any more
            await stdout.write(json.dumps({"jsonrpc": "2.0", "id": id_, "result": {"from": "server"}}))
        await stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}))
        return seen

    seen = anyio.run(real_server)
    assert [line.encode() for line in seen] == sent
    passed = [wire.reply() for _ in range(3)]
    assert [f.get("id") for f in passed] == [3, 2, None]
    assert all(f.get("result", {}).get("from") == "server" for f in passed[:2])


def test_frames_with_unicode_line_separators_pass_whole() -> None:
    """JSON leaves U+2028, U+2029 and U+0085 unescaped inside strings; they must not split a frame."""
    wire = Wire()
    front = Front(lambda: "i", None, wire=wire.front_side)
    wire.close_input()
    text = "a\u2028b\u2029c\x85d\x0be\x1cf"
    frame = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"text": text}}, ensure_ascii=False)

    async def server() -> None:
        _, stdout = front.attach()
        await stdout.write(frame + "\n")

    anyio.run(server)
    reply = wire.reply()
    assert reply["id"] == 7 and reply["result"]["text"] == text


def test_unknown_revisions_and_garbage_wait_for_the_real_server(snapshot: dict[str, Any]) -> None:
    wire = Wire()
    front = Front(lambda: "i", snapshot, wire=wire.front_side)
    wire.send(b"not json\n")
    wire.send(_frame(1, "tools/list"))  # before initialize: not the front's to answer
    wire.send(_frame(2, "initialize", {"protocolVersion": "1999-01-01"}))
    wire.send(_frame(3, "server/discover"))
    wire.close_input()
    assert _drained(front, wire) == 4
    assert wire.replies.readline() == b""  # the front wrote nothing


def test_after_a_request_it_cannot_answer_the_front_answers_nothing_more(snapshot: dict[str, Any]) -> None:
    """A 2026-era probe that timed out may already have locked the real server's era: no early initialize."""
    wire = Wire()
    front = Front(lambda: "i", snapshot, wire=wire.front_side)
    wire.send(_frame(1, "server/discover", {"_meta": {}}))
    wire.send(_frame(2, "initialize", {"protocolVersion": next(iter(snapshot["initialize"]))}))
    wire.send(_frame(3, "tools/list"))
    wire.close_input()
    assert _drained(front, wire) == 3
    assert wire.replies.readline() == b""


def test_switched_off_the_front_answers_nothing(snapshot: dict[str, Any]) -> None:
    wire = Wire()
    front = Front(lambda: "i", None, wire=wire.front_side)
    wire.send(_frame(1, "initialize", {"protocolVersion": next(iter(snapshot["initialize"]))}))
    wire.close_input()
    assert _drained(front, wire) == 1
    assert wire.replies.readline() == b""


@pytest.mark.slow
def test_the_snapshot_matches_the_live_server() -> None:
    """A tool or dependency change that alters the handshake must re-record the snapshot."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "mcp_snapshot.py"), "--check"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
