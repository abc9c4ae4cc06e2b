"""Answer the MCP handshake on stdio before fastmcp has been imported.

Importing fastmcp and declaring the tools costs one to two seconds of CPU, and an
MCP client waits for `initialize` and the listings (`tools/list`, and the prompts
and resources the server declares) before it does anything else. The front claims
stdin/stdout the moment `minirag serve` starts, answers those requests and `ping`
from `mcp_snapshot.json` (the real server's own answers, recorded by
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

A plain `tools/call` of `query_documents` (the first thing a client that came to
search sends) is answered too, from the Appliance that `serve` starts warming up
before fastmcp is imported: importing fastmcp then waits until the warm-up is done
(or until a request only the real server can answer arrives), so the first search
does not share the CPU with it. That call is still fed to the real server, which
runs the (read-only) search again; of the two replies only the first reaches the
client. A call the front cannot answer as-is (other arguments, a failed search)
is left to the real server, which reports its errors as values.

`MCP_FAST_HANDSHAKE=0` turns the front off (every line waits for fastmcp).
"""
from __future__ import annotations

import json
import logging
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from appliance.config import Environment

SNAPSHOT = Path(__file__).with_name("mcp_snapshot.json")
EarlyTools = Callable[[Any, Any], Optional[Callable[[], dict[str, Any]]]]
"""(tool name, arguments) -> a function giving the tools/call result (raising if it cannot), or None."""
_EOF = None
_started: "Front | None" = None


class Front:
    """Owns the wire (private duplicates of fd 0 and 1) from process start until the process exits."""

    def __init__(self, instructions: Callable[[], str], snapshot: dict[str, Any] | None,
                 wire: tuple[Any, Any] | None = None,
                 tools: "EarlyTools | None" = None) -> None:
        self._instructions = instructions
        self._handshake: dict[str, Any] = (snapshot or {}).get("initialize", {})
        self._listings: dict[str, Any] = {k: v for k, v in (snapshot or {}).items() if k.endswith("/list")}
        self._version: str | None = None
        self._answered: set[Any] = set()
        self._tools = tools
        self._pending: set[Any] = set()  # tool calls the front is running
        self._replied: set[Any] = set()  # ... that the real server answered first
        self.handed_over = threading.Event()
        """Set when the front answers nothing more (or never did): only the real server can go on."""
        self._attached = False
        self._state = threading.Lock()
        self._out_lock = threading.Lock()
        self._lines: "queue.Queue[bytes | None]" = queue.Queue()
        self._stdin, self._stdout = wire or _claim_wire()
        if not self._handshake:
            self.handed_over.set()
        threading.Thread(target=self._read, name="stdio-front", daemon=True).start()

    # ------------------------------------------------------------ the wire
    def _read(self) -> None:
        try:
            for line in self._stdin:
                self._answer_early(line)
                self._lines.put(line)
        finally:
            self._lines.put(_EOF)
            self.handed_over.set()

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
                self._stop_answering()  # garbage or a batch: from here on only the real server answers
                return
            if "id" not in frame:
                return  # a notification changes nothing the front answers
            if self._call_early(frame):
                return
            result = self._early_result(frame)
            if result is None:
                # A request only the real server can answer may change its state (a `server/discover`
                # locks the connection to the 2026 era, say), so the front stops answering for good.
                self._stop_answering()
                return
            self._answered.add(_id_key(frame["id"]))
        self.write_line(json.dumps({"jsonrpc": "2.0", "id": frame["id"], "result": result},
                                   ensure_ascii=False, separators=(",", ":")))

    def _stop_answering(self) -> None:
        self._handshake = {}
        self.handed_over.set()

    def _call_early(self, frame: dict[str, Any]) -> bool:
        """Start answering a plain tools/call in the background (under self._state); False if not one."""
        params = frame.get("params")
        if (self._tools is None or self._version is None or frame.get("method") != "tools/call"
                or not isinstance(params, dict) or not set(params) <= {"name", "arguments", "_meta"}):
            return False  # a task, say: the real server's business
        meta = params.get("_meta", {})
        if not isinstance(meta, dict) or not set(meta) <= {"progressToken"}:
            return False  # a progress token is fine (progress notifications are optional); other _meta is not
        key = _id_key(frame["id"])
        if key in self._pending or key in self._answered:
            return False
        call = self._tools(params.get("name"), params.get("arguments"))
        if call is None:
            return False
        self._pending.add(key)
        threading.Thread(target=self._run_tool, args=(frame["id"], key, call),
                         name="stdio-front-call", daemon=True).start()
        return True

    def _run_tool(self, id_: Any, key: Any, call: Callable[[], dict[str, Any]]) -> None:
        line: str | None = None
        try:
            line = json.dumps({"jsonrpc": "2.0", "id": id_, "result": call()}, ensure_ascii=False,
                              separators=(",", ":"))
            line.encode("utf-8")  # a lone surrogate cannot go out: leave the call to the real server
        except Exception:
            # the real server runs the call again and reports (and logs) what went wrong
            logging.getLogger("appliance.server").debug("early tool call left to the server", exc_info=True)
            line = None
        with self._state:
            self._pending.discard(key)
            if key in self._replied:  # the real server answered first
                self._replied.discard(key)
                return
            if line is None:
                self.handed_over.set()  # the request waits in the real server's queue
                return
            self._answered.add(key)
            self.write_line(line)  # still under the lock: the real server's reply now sees it answered

    def _early_result(self, frame: dict[str, Any]) -> dict[str, Any] | None:
        params = frame.get("params") if isinstance(frame.get("params"), dict) else {}
        method = frame.get("method")
        if method == "initialize" and self._version is None:
            entry = self._handshake.get(params.get("protocolVersion"))
            if entry is None:
                return None
            self._version = params["protocolVersion"]
            return {**entry, "instructions": self._instructions()}
        if self._version is None:
            return None
        if method in self._listings and "cursor" not in params:
            return self._listings[method]
        if method == "ping":
            return {}
        return None

    # ------------------------------------------------------------ the real server's side
    def attach(self) -> tuple["_QueuedLines", "_FilteredOut"]:
        """The (stdin, stdout) pair for the SDK's stdio_server: every queued line, then the rest."""
        with self._state:
            self._attached = True
        self.handed_over.set()
        return _QueuedLines(self._lines), _FilteredOut(self)

    def drops(self, text: str) -> bool:
        """True for the real server's reply to a request the front already answered (once per id)."""
        if not (self._answered or self._pending) or '"result"' not in text and '"error"' not in text:
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
            if key in self._pending:
                self._replied.add(key)  # the front's own answer, still running, is dropped instead
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


def start(instructions: Callable[[], str], tools: EarlyTools | None = None, *, answer_early: bool = True) -> Front:
    """Claim the wire and start answering (unless `answer_early` is off: MCP_FAST_HANDSHAKE=0); once per process."""
    global _started
    if _started is None:
        _started = Front(instructions, _load_snapshot() if answer_early else None, tools=tools)
    return _started


WARM_UP_WAIT = 30.0
"""Seconds the fastmcp import waits at most for the warm-up while the front answers everything."""


def serve(environment: Environment, overrides: dict[str, Any]) -> None:
    """`minirag serve`: claim the wire first, start the warm-up, then import and run fastmcp behind the front.

    `environment` is what the CLI read at start; `overrides` are its flags (see `Environment.settings`).

    The fastmcp import waits for the warm-up (so a first query_documents, which the front answers,
    does not share the CPU with it), but only for its imports once a request arrives that only the
    real server can answer (two threads importing at once gain nothing under the GIL). With the
    front off, fastmcp is imported first and the warm-up follows, as the client waits for it.
    """
    from appliance import stopping
    from appliance.runtime import Runtime, early_tool_call

    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stopping.exit_on_signals()
    runtime = Runtime(environment, overrides)
    front = start(runtime.instructions, tools=lambda name, args: early_tool_call(runtime, name, args),
                  answer_early=environment.mcp_fast_handshake)
    if front.handed_over.is_set():
        # The front answers nothing (MCP_FAST_HANDSHAKE=0, no snapshot): the client waits for fastmcp's
        # initialize, so fastmcp comes first and serve_stdio starts the warm-up after it.
        from appliance.server import serve_stdio

        serve_stdio(front, runtime)
        stopping.exit_when_quiet("the MCP client disconnected")
    runtime.warm_up()
    deadline = time.monotonic() + WARM_UP_WAIT
    while time.monotonic() < deadline and not runtime.warmed.is_set():
        if front.handed_over.is_set() and runtime.imported.is_set():
            break
        (runtime.imported if front.handed_over.is_set() else runtime.warmed).wait(0.02)
    from appliance.server import serve_stdio

    serve_stdio(front, runtime)
    # The client closed stdin: a sync_start job stops (its write in flight finishes) and nothing
    # else (a conversion, a query, the warm-up) is waited for.
    stopping.exit_when_quiet("the MCP client disconnected")
