"""Answer the MCP handshake on stdio before fastmcp has been imported.

Importing fastmcp and declaring the tools costs one to two seconds of CPU, and an
MCP client waits for `initialize` and `tools/list` before it does anything else.
The front claims stdin/stdout the moment `minirag serve` starts, answers those two
requests from `mcp_snapshot.json` (the real server's own answers, recorded by
`scripts/mcp_snapshot.py` and compared with the live server by the tests), and
queues every line it reads. When the fastmcp server is built, it is fed the whole
queue in order — the answered requests included, so its session state is exactly
what it would have been without the front — and its replies to the requests the
front already answered are dropped. The front answers only while every request so
far was its own: the first thing it does not recognise (an unknown protocol
revision, the 2026 era's `server/discover`, a batch, bad JSON) hands all answering
to the real server, whose state that request may change. (A 2026-era client whose
`server/discover` probe times out falls back to `initialize`: the real server
answers that one too, with the -32022 that makes the client probe again.)

`MCP_FAST_HANDSHAKE=0` turns the front off (every line waits for fastmcp).
"""
from __future__ import annotations

import json
import os
import queue
import sys
import threading
from pathlib import Path
from typing import Any, Callable

SNAPSHOT = Path(__file__).with_name("mcp_snapshot.json")
_EOF = None
_started: "Front | None" = None


class Front:
    """Owns the wire (private duplicates of fd 0 and 1) from process start until the process exits."""

    def __init__(self, instructions: Callable[[], str], snapshot: dict[str, Any] | None,
                 wire: tuple[Any, Any] | None = None) -> None:
        self._instructions = instructions
        self._handshake: dict[str, Any] = (snapshot or {}).get("initialize", {})
        self._listing: dict[str, Any] | None = (snapshot or {}).get("tools/list")
        self._version: str | None = None
        self._answered: set[Any] = set()
        self._attached = False
        self._state = threading.Lock()
        self._out_lock = threading.Lock()
        self._lines: "queue.Queue[bytes | None]" = queue.Queue()
        self._stdin, self._stdout = wire or _claim_wire()
        threading.Thread(target=self._read, name="stdio-front", daemon=True).start()

    # ------------------------------------------------------------ the wire
    def _read(self) -> None:
        try:
            for line in self._stdin:
                self._answer_early(line)
                self._lines.put(line)
        finally:
            self._lines.put(_EOF)

    def write_line(self, text: str) -> None:
        data = text.encode("utf-8") + b"\n"
        with self._out_lock:
            self._stdout.write(data)
            self._stdout.flush()

    # ------------------------------------------------------------ early answers
    def _answer_early(self, line: bytes) -> None:
        with self._state:
            if self._attached or not self._handshake:
                return
            try:
                frame = json.loads(line)
            except ValueError:
                frame = None
            if not isinstance(frame, dict):
                self._handshake = {}  # garbage or a batch: from here on only the real server answers
                return
            if "id" not in frame:
                return  # a notification changes nothing the front answers
            result = self._early_result(frame)
            if result is None:
                # A request only the real server can answer may change its state (a `server/discover`
                # locks the connection to the 2026 era, say), so the front stops answering for good.
                self._handshake = {}
                return
            self._answered.add(_id_key(frame["id"]))
        self.write_line(json.dumps({"jsonrpc": "2.0", "id": frame["id"], "result": result},
                                   ensure_ascii=False, separators=(",", ":")))

    def _early_result(self, frame: dict[str, Any]) -> dict[str, Any] | None:
        params = frame.get("params") if isinstance(frame.get("params"), dict) else {}
        method = frame.get("method")
        if method == "initialize" and self._version is None:
            entry = self._handshake.get(params.get("protocolVersion"))
            if entry is None:
                return None
            self._version = params["protocolVersion"]
            return {**entry, "instructions": self._instructions()}
        if method == "tools/list" and self._version is not None and "cursor" not in params:
            return self._listing
        return None

    # ------------------------------------------------------------ the real server's side
    def attach(self) -> tuple["_QueuedLines", "_FilteredOut"]:
        """The (stdin, stdout) pair for the SDK's stdio_server: every queued line, then the rest."""
        with self._state:
            self._attached = True
        return _QueuedLines(self._lines), _FilteredOut(self)

    def drops(self, text: str) -> bool:
        """True for the real server's reply to a request the front already answered (once per id)."""
        if not self._answered or '"result"' not in text and '"error"' not in text:
            return False
        try:
            frame = json.loads(text)
        except ValueError:
            return False
        if not isinstance(frame, dict) or "method" in frame or "id" not in frame:
            return False
        key = _id_key(frame["id"])
        with self._state:
            if key in self._answered:
                self._answered.discard(key)
                return True
        return False


def _id_key(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)


class _QueuedLines:
    """An async line source over the front's queue (what stdio_server iterates)."""

    def __init__(self, lines: "queue.Queue[bytes | None]") -> None:
        self._lines = lines

    def __aiter__(self) -> "_QueuedLines":
        return self

    async def __anext__(self) -> str:
        import anyio

        line = await anyio.to_thread.run_sync(self._lines.get, abandon_on_cancel=True)
        if line is _EOF:
            self._lines.put(_EOF)  # a second reader sees the end too
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _FilteredOut:
    """An async text sink onto the wire that drops replies the front already gave."""

    def __init__(self, front: Front) -> None:
        self._front = front

    async def write(self, text: str) -> None:
        # Only "\n" ends a frame: str.splitlines() would also cut at U+2028, U+0085 and the like,
        # which JSON carries unescaped inside strings (a document's text, say).
        for line in text.split("\n"):
            if line and not self._front.drops(line):
                self._front.write_line(line)

    async def flush(self) -> None:
        return None


def _claim_wire() -> tuple[Any, Any]:
    """Private duplicates of fd 0/1; fd 0 then reads /dev/null and fd 1 goes to stderr.

    Stray output from libraries and child processes so never reaches the client
    (the SDK's own stdio transport does the same when it is not given streams).
    """
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(wire_in, "rb"), os.fdopen(wire_out, "wb")


def _load_snapshot() -> dict[str, Any] | None:
    try:
        return json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def start(instructions: Callable[[], str]) -> Front:
    """Claim the wire and start answering; once per process."""
    global _started
    if _started is None:
        enabled = os.environ.get("MCP_FAST_HANDSHAKE", "1").strip().lower() not in ("0", "false", "no", "off")
        _started = Front(instructions, _load_snapshot() if enabled else None)
    return _started


def serve(overrides: dict[str, Any]) -> None:
    """`minirag serve`: claim the wire first, then import and run the fastmcp server behind the front."""
    from appliance.instructions import instructions_for

    front = start(lambda: instructions_for(overrides))
    from appliance.server import serve_stdio

    serve_stdio(front, overrides)
