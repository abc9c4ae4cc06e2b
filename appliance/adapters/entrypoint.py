"""The container's entrypoint (`python3 -m appliance.adapters.entrypoint`, also `minirag entrypoint`).

Modes, by the first argument:

* none or `serve` (stdio): the MCP server on the container's stdin/stdout, plus the
  sync scheduler. Supervisor cannot pass stdin through to a child, so this process
  (PID 1) runs `minirag serve` itself as a foreground child that inherits
  stdin/stdout, and starts `supervisord` in the background for the scheduler, with
  its stdin on /dev/null and its stdout on our stderr, once the server has loaded its
  model and index (SCHEDULER_START_LIMIT_S). The container's stdout carries only
  MCP frames. When the client disconnects (the server exits), supervisord is stopped
  and the container exits with the server's status; SIGTERM/SIGINT go to both.
  Everything fits Docker's 10 s grace: a sync stops within a second or two (see
  appliance/platform/stopping.py), supervisord gives the scheduler 5 s (stopwaitsecs), and
  this process kills whatever still runs STOP_WAIT_S after the stop began.
  As PID 1 this process also reaps orphaned children.
* `daemon`: `supervisord` in the foreground (exec'd, so it is PID 1) running the
  scheduler and the MCP server over streamable HTTP at MCP_HTTP_ADDRESS.
* `sync`: one reconcile and exit (refused when nothing is mounted at the document
  root, because syncing an empty folder would empty the index).
* `healthcheck`: the image's HEALTHCHECK (`minirag status` must answer; in daemon mode
  the HTTP port must accept connections too).
* anything else: passed to `minirag` unchanged (`docker run ... IMAGE query "..." --json`).

This process is a composition root: `main` reads the environment (appliance.config) when a mode
needs it, so `healthcheck` and the pass-through stay as light as they were.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.sync.state import SCHEDULER_START_LIMIT_S

if TYPE_CHECKING:
    from appliance.config import Environment

STDIO_CONF = "supervisord-stdio.conf"
DAEMON_CONF = "supervisord-daemon.conf"
DAEMON_MARKER = Path("/tmp/minirag-daemon-mode")
STOP_WAIT_S = 6.5
"""From SIGTERM (or the client leaving) to killing what still runs: more than supervisord's
stopwaitsecs (5 s) for the scheduler, less than Docker's 10 s grace before its SIGKILL."""


def _minirag() -> str:
    exe = Path(sys.executable).with_name("minirag")
    return str(exe) if exe.exists() else "minirag"


def _supervisord() -> str:
    exe = Path(sys.executable).with_name("supervisord")
    return str(exe) if exe.exists() else "supervisord"


def _err(message: str) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()


def run_stdio(args: list[str], environment: Callable[[], Environment]) -> int:
    """MCP on stdio in the foreground, the scheduler under a background supervisord started once the server is warm.

    `environment()` reads the environment; called once the server runs, so the read does not delay it."""
    # The server first: the client is waiting for its handshake. It writes to `ready` when its
    # model and index are loaded, and the scheduler starts then (or after SCHEDULER_START_LIMIT_S).
    ready, ready_for_server = os.pipe()
    server = subprocess.Popen([_minirag(), "serve", "--ready-fd", str(ready_for_server), *args],
                              pass_fds=(ready_for_server,))  # inherits stdin/stdout: the MCP wire
    os.close(ready_for_server)
    conf = environment().minirag_supervisor_dir / STDIO_CONF
    scheduler = _Scheduler(conf)
    if conf.is_file():
        threading.Thread(target=scheduler.start_when_ready, args=(ready, SCHEDULER_START_LIMIT_S),
                         name="scheduler-start", daemon=True).start()
        threading.Thread(target=_on_hangup, args=(scheduler,), name="stdin-hangup", daemon=True).start()
    else:
        os.close(ready)
        _err(f"warning: {conf} not found; running without the sync scheduler")

    stop_at: list[float] = []  # when the stop began: every wait ends STOP_WAIT_S after it

    def forward(signum: int, _frame: object) -> None:
        stop_at[:1] = stop_at[:1] or [time.monotonic()]
        scheduler.stop(signal.SIGTERM if signum == signal.SIGTERM else signum)
        if server.poll() is None:
            server.send_signal(signal.SIGTERM if signum == signal.SIGTERM else signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    _wait_reaping(server, lambda: stop_at[0] + STOP_WAIT_S if stop_at else None)
    stop_at[:1] = stop_at[:1] or [time.monotonic()]  # the client left: stop the scheduler now
    for proc, program in ((scheduler.stop(signal.SIGTERM), "supervisord"), (server, "minirag")):
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            _wait_reaping(proc, lambda: stop_at[0] + STOP_WAIT_S)
            if proc.poll() is None:
                _err(f"warning: {program} did not stop within {STOP_WAIT_S:g} s; killing it")
                proc.kill()
                _wait_reaping(proc, lambda: None)
    return _exit_code(server)


class _Scheduler:
    """The background supervisord of stdio mode: started late, on its own thread, and never after a stop."""

    def __init__(self, conf: Path) -> None:
        self.conf = conf
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._lock = threading.RLock()  # re-entered when a signal handler interrupts stop() in the main thread

    def start_when_ready(self, ready: int, limit: float) -> None:
        """Start supervisord when the server writes to (or closes) `ready`, or after `limit` seconds."""
        try:
            select.select([ready], [], [], limit)
        finally:
            os.close(ready)
        with self._lock:
            if not self._stopped:
                self._proc = subprocess.Popen([_supervisord(), "-n", "-c", str(self.conf)], stdin=subprocess.DEVNULL,
                                              stdout=sys.stderr.fileno(), stderr=sys.stderr.fileno(),
                                              start_new_session=True)

    def stop(self, signum: int) -> subprocess.Popen[bytes] | None:
        """Send `signum` to supervisord if it runs, and never start it from now on; returns its process."""
        with self._lock:
            self._stopped = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signum)
        return proc


def _on_hangup(scheduler: _Scheduler) -> None:
    """SIGTERM to supervisord the moment the client closes our stdin (a pipe under `docker run -i`):
    the scheduler stops while the server is still finishing, not after it."""
    watch = select.poll()
    watch.register(0, 0)  # no events asked for: only POLLHUP/POLLERR wake us, never data for the server
    try:
        if any(events & (select.POLLHUP | select.POLLERR) for _fd, events in watch.poll()):
            scheduler.stop(signal.SIGTERM)
    except (OSError, ValueError):
        pass


def _wait_reaping(proc: subprocess.Popen[bytes], deadline: Callable[[], float | None]) -> int:
    """Wait for `proc` until `deadline()` (None: no deadline yet; a signal may set one), reaping
    any other child (orphans re-parented to PID 1) meanwhile."""
    while proc.returncode is None:
        until = deadline()
        if until is not None and time.monotonic() >= until:
            break
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            proc.poll()
            break
        except InterruptedError:
            continue
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
        elif pid == 0:
            time.sleep(0.1)  # polled, so a deadline a signal set is seen at once
    return _exit_code(proc)


def _exit_code(proc: subprocess.Popen[bytes]) -> int:
    code = proc.returncode if proc.returncode is not None else 1
    return 128 - code if code < 0 else code


def run_daemon(environment: Environment) -> int:
    """supervisord as PID 1 with the scheduler and the MCP HTTP server."""
    from appliance.adapters.http_server import AddressRefused, check_address
    from appliance.errors import ConfigError

    address = environment.mcp_http_address
    try:
        check_address(address, environment.mcp_auth_token)
        environment.allowed_hosts()  # a bad MCP_ALLOWED_HOSTS stops here, not in a restart loop under supervisord
    except (AddressRefused, ConfigError) as exc:
        _err(f"error: {exc}")
        return 2
    os.environ["MCP_HTTP_ADDRESS"] = address  # for supervisord's %(ENV_MCP_HTTP_ADDRESS)s
    with contextlib.suppress(OSError):
        DAEMON_MARKER.write_text(address)
    conf = environment.minirag_supervisor_dir / DAEMON_CONF
    os.execv(_supervisord(), [_supervisord(), "-n", "-c", str(conf)])


def run_sync(args: list[str], environment: Environment) -> int:
    """One reconcile; refuses when the document root is not mounted in the container."""
    if environment.minirag_container and "--base-dir" not in " ".join(args):
        from appliance.adapters.scheduler import is_mount_point

        for root in _roots(environment):
            if not root.is_dir() or not is_mount_point(root):
                _err(f"error: no documents are mounted at {root}; nothing to sync")
                _err(f"hint: docker run --rm -v /path/to/docs:{root}:ro -v minirag-index:/index IMAGE sync")
                return 1
    os.execv(_minirag(), [_minirag(), "sync", *args])


def _temp_dir_writable() -> bool:
    """Whether Python finds a temporary directory it can write: conversion workers, the fork server of a
    long sync and supervisord put their files there, and under `--read-only` with no `--tmpfs /tmp` a sync
    died deep inside with "No usable temporary directory found"."""
    import tempfile

    try:
        tempfile.gettempdir()
    except FileNotFoundError:
        return False
    return True


def _roots(environment: Environment) -> list[Path]:
    try:
        return list(environment.settings().roots)
    except Exception:  # noqa: BLE001 - any bad configuration: the healthcheck falls back to the default root
        return [Path(environment.base_dir if environment.base_dir is not None else "/docs")]


def healthcheck() -> int:
    """0 when `minirag status` answers (and, in daemon mode, the HTTP port accepts connections)."""
    if DAEMON_MARKER.exists():
        host, _, port = DAEMON_MARKER.read_text().strip().rpartition(":")
        host = "127.0.0.1" if host in ("0.0.0.0", "", "[::]", "::") else host.strip("[]")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except (OSError, ValueError) as exc:
            _err(f"unhealthy: MCP HTTP endpoint {host}:{port} does not accept connections ({exc})")
            return 1
    try:
        out = subprocess.run([_minirag(), "status"], capture_output=True, timeout=60, text=True)
        data = json.loads(out.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        _err(f"unhealthy: `minirag status` did not answer ({exc})")
        return 1
    problem = data.get("configError") or data.get("indexError")
    if problem:
        _err(f"unhealthy: {problem.get('message', problem)}")
        return 1
    print("healthy")
    return 0


def main(argv: list[str] | None = None, environment: Environment | None = None) -> int:
    """`environment`: what `minirag entrypoint` read; read here (once, when a mode needs it) otherwise."""
    args = list(sys.argv[1:] if argv is None else argv)
    mode = args[0] if args else "serve"
    rest = args[1:]

    def env() -> Environment:
        nonlocal environment
        if environment is None:
            from appliance.config import read_environment

            environment = read_environment()
        return environment

    if mode in ("serve", "daemon", "sync") and not _temp_dir_writable():
        _err("error: no writable temporary directory (/tmp): the server, the scheduler and a sync need one")
        _err("hint: a container run with --read-only also needs --tmpfs /tmp, as the README's commands have")
        return 2
    if mode == "serve" and "--help" not in rest:
        return run_stdio(rest, env)
    if mode == "daemon":
        return run_daemon(env())
    if mode == "sync":
        return run_sync(rest, env())
    if mode == "healthcheck":
        return healthcheck()
    os.execv(_minirag(), [_minirag(), *args])


if __name__ == "__main__":
    sys.exit(main())
