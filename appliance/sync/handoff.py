"""A whole-index `minirag sync` handed to a warm server on the same index.

A fresh process pays 3-4 s before its first chunk (Python and the CLI, the LanceDB import, the
tokenizer's 250,000 pieces, the ONNX session); an MCP server or daemon that has warmed up paid it
once. The first warm server on an index listens on DB_PATH/.sync.sock, and `minirag sync` asks it
(appliance.sync.runner decides who asks). The server runs the same `Appliance.sync` under the same
sync lock; the client's progress follows it and the client's Ctrl-C or SIGTERM stops it as it
would stop a local sync.

Anything but a finished report and the client runs the sync itself: nobody listens (a stale socket
file, no server), the server sees other inputs (another configuration, model or code version, or
other folders behind the same root paths: the fingerprint holds each root's device and inode), the
server failed or stopped mid-way (what it wrote stays; the local sync goes on from there), or the
socket is unusable (another user, a path too long for a socket, a read-only index). Only one warm
process per index listens; when it exits, the next server to warm up takes the socket over.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.platform import stopping
from appliance.results import RunReport

SOCKET_NAME = ".sync.sock"
PROTOCOL = 1
MAX_SOCKET_PATH = 100
"""Below the kernel's limit for a socket path (108 bytes on Linux, 104 on macOS)."""
CONNECT_TIMEOUT_S = 2.0
SEND_TIMEOUT_S = 30.0
PROGRESS_EVERY_S = 0.25
"""The server sends progress at most this often; the client's bar is redrawn no faster anyway."""

log = logging.getLogger("appliance.sync.handoff")

Progress = Callable[[str, int, int, str], None]


def socket_path(db_path: Path) -> Path | None:
    path = db_path / SOCKET_NAME
    return path if len(os.fsencode(path)) <= MAX_SOCKET_PATH else None


def fingerprint(settings: Settings) -> str:
    """What must be equal for the server's sync to be the one this process would run: the sync inputs
    (sync.stamp.inputs_digest: settings, model, scheme, code version, formats) and which directories
    the roots and the index are on this machine (the same path can hold other folders elsewhere)."""
    from appliance.sync.stamp import inputs_digest

    places = []
    for path in (*settings.roots, settings.db_path):
        try:
            st = os.stat(path)
            places.append([str(path), st.st_dev, st.st_ino])
        except OSError:
            places.append([str(path), None, None])
    text = json.dumps([inputs_digest(settings), places])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# ---- the client: `minirag sync` ----------------------------------------------------------------
def request_sync(settings: Settings, progress: Progress | None = None) -> RunReport | None:
    """The report of a whole-index sync a warm server ran for us, or None (then run it here).

    Raises stopping.Stopped when this process was asked to stop while the server synced (the
    server stops its sync too, as the peer closing the socket tells it)."""
    path = socket_path(settings.db_path)
    if path is None:
        return None
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.connect(str(path))
    except OSError:
        return None  # no socket, a stale one, no permission, nobody accepting
    with conn:
        try:
            conn.sendall(_line({"protocol": PROTOCOL, "op": "sync", "fingerprint": fingerprint(settings)}))
            for message in _messages(conn):
                if "progress" in message and progress is not None:
                    progress(*message["progress"])
                elif "report" in message:
                    return RunReport.from_dict(message["report"])
                elif "declined" in message or "error" in message:
                    log.info("the server on this index did not run the sync (%s); running it here",
                             message.get("declined") or message["error"].get("message"))
                    return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.info("the server on this index stopped answering (%s); running the sync here", exc)
    return None


def _messages(conn: socket.socket) -> Iterator[dict[str, Any]]:
    """The server's lines as they come; checks this process's stop request between them."""
    buffer = b""
    conn.settimeout(0.2)  # wakes the loop to look at this process's stop request
    while True:
        if stopping.requested():
            raise stopping.Stopped(stopping.reason() or "stopping")
        try:
            data = conn.recv(65536)
        except TimeoutError:
            continue
        if not data:
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"


# ---- the server: a warm `minirag serve` / `serve-http` ---------------------------------------
class Listener:
    """Accepts sync requests on DB_PATH/.sync.sock for one warm server (see the module); `run(progress)`
    runs the sync (appliance.sync.runner.listener makes one that goes through the runner)."""

    def __init__(self, settings: Settings, run: Callable[[Progress], RunReport]) -> None:
        self.settings = settings
        self.run = run
        self.path = socket_path(settings.db_path)
        self._sock: socket.socket | None = None
        self._inode: int | None = None

    def start(self) -> bool:
        """Listen unless another live process does (or the socket cannot be made); True when listening."""
        if self.path is None:
            return False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # an index not synced yet
            self._sock = self._bind(self.path)
        except OSError as exc:
            log.info("not taking sync requests on %s: %s", self.path, exc)
            return False
        if self._sock is None:
            return False
        self._inode = os.stat(self.path).st_ino
        threading.Thread(target=self._accept, name="handoff-listener", daemon=True).start()
        stopping.add_hook(self.close)  # the socket goes when the server stops
        return True

    @staticmethod
    def _bind(path: Path) -> socket.socket | None:
        if path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(CONNECT_TIMEOUT_S)
            try:
                probe.connect(str(path))
                return None  # a live server listens already
            except OSError:
                path.unlink(missing_ok=True)  # left by a server that died
            finally:
                probe.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            sock.listen(8)
        except OSError:
            sock.close()
            raise
        return sock

    def close(self) -> None:
        """Stop listening and remove the socket file when it is still ours."""
        sock, self._sock = self._sock, None
        if sock is not None and self.path is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked on it
            sock.close()
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == self._inode:
                    self.path.unlink()
        stopping.remove_hook(self.close)  # a registered hook would keep stopping.wait_quiet waiting

    def _accept(self) -> None:
        while self._sock is not None:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name="handoff-request", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(CONNECT_TIMEOUT_S)
                with conn.makefile("rb") as request:
                    ask = json.loads(request.readline(65536))
                conn.sendall(_line(self._answer(conn, ask)))
            except Exception as exc:  # noqa: BLE001 - a bad request or a peer gone never harms the server
                log.info("a sync request ended without a report: %s: %s", type(exc).__name__, exc)

    def _answer(self, conn: socket.socket, ask: object) -> dict[str, Any]:
        from appliance.errors import ApplianceError

        if not isinstance(ask, dict) or ask.get("protocol") != PROTOCOL or ask.get("op") != "sync":
            return {"declined": "not a sync request of this version"}
        if ask.get("fingerprint") != fingerprint(self.settings):
            return {"declined": "this server syncs other inputs (configuration, model, code or folders)"}
        conn.settimeout(SEND_TIMEOUT_S)  # a client that stops reading must not hold the sync (and its lock)
        try:
            report = self.run(_Relay(conn))
        except stopping.Stopped as exc:
            return {"error": {"code": "stopped", "message": str(exc)}}
        except ApplianceError as exc:
            return {"error": exc.to_dict()}
        return {"report": report.to_dict()}


class _Relay:
    """The sync's progress callback on the server: sends progress, and stops the sync (as a stopping
    process does: the write in flight finishes) once the client has left."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.sent = 0.0
        self.lock = threading.Lock()

    def __call__(self, phase: str, done: int, total: int, path: str) -> None:
        with self.lock:
            try:
                readable, _, _ = select.select([self.conn], [], [], 0)
                gone = bool(readable) and not self.conn.recv(1, socket.MSG_PEEK)
                now = time.monotonic()
                if not gone and now - self.sent >= PROGRESS_EVERY_S:
                    self.sent = now
                    self.conn.sendall(_line({"progress": [phase, done, total, path]}))
            except OSError:
                gone = True
        if gone:
            raise stopping.Stopped("the client that asked for this sync left")
