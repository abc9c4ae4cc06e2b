"""A prompt, clean stop of a running sync: SIGTERM, Ctrl-C, the MCP client leaving.

`request(reason)` is safe to call from a signal handler. It marks the process as
stopping and, on a thread of its own (a signal handler must not take locks the
interrupted code may hold), runs the stop hooks of everything registered with
`on_stop`: the conversion pool kills its worker processes (a slow PDF is not
waited for), the embed/write pipeline abandons the chunks still waiting for the
model and lets only the LanceDB write in flight finish. The sync then unwinds
with `Stopped`; what it did not write, the next sync does (a write interrupted
anyway, by a kill, is repaired by the next sync too).

`wait_quiet(seconds)` waits until nothing registered is left running: what a
process does between a stop and exiting.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import NoReturn

_requested = threading.Event()
_reason: list[str] = []
_hooks: dict[Callable[[], None], Callable[[], None]] = {}  # bound methods hash by (self, function)
_cond = threading.Condition(threading.Lock())


class Stopped(Exception):
    """A sync left early because the process is stopping; the next sync finishes the rest."""


def requested() -> bool:
    return _requested.is_set()


def reason() -> str | None:
    return _reason[0] if _reason else None


def check() -> None:
    """Raise Stopped once a stop was requested (at a point where leaving is safe)."""
    if _requested.is_set():
        raise Stopped(reason() or "stopping")


def request(why: str = "stopping") -> None:
    """Stop every registered sync in this process; returns at once (signal-handler safe)."""
    if _requested.is_set():
        return
    _reason.append(why)
    _requested.set()
    threading.Thread(target=_run_hooks, name="stop-hooks", daemon=True).start()


def _run_hooks() -> None:
    with _cond:
        hooks = list(_hooks.values())
    for hook in hooks:
        with suppress(Exception):  # one failing hook must not keep the others from running
            hook()


def add_hook(hook: Callable[[], None]) -> None:
    """Run `hook` when a stop is requested (at once if one already was) until `remove_hook(hook)`."""
    with _cond:
        _hooks[hook] = hook
    if _requested.is_set():
        hook()


def remove_hook(hook: Callable[[], None]) -> None:
    with _cond:
        _hooks.pop(hook, None)
        _cond.notify_all()


@contextmanager
def on_stop(hook: Callable[[], None]) -> Iterator[None]:
    """`hook` runs when a stop is requested while the block runs (at once if one already was)."""
    add_hook(hook)
    try:
        yield
    finally:
        remove_hook(hook)


def wait_quiet(seconds: float) -> bool:
    """Wait until every registered block has ended; False when `seconds` passed first."""
    deadline = time.monotonic() + seconds
    with _cond:
        return _cond.wait_for(lambda: not _hooks, timeout=max(0.0, deadline - time.monotonic()))


SERVER_STOP_WAIT_S = 3.0
"""How long a stopping server waits for a sync's write in flight before it exits anyway."""


def exit_when_quiet(why: str, seconds: float = SERVER_STOP_WAIT_S, code: int = 0) -> NoReturn:
    """Stop, wait (at most `seconds`) for the LanceDB write in flight, then end the process at once:
    threads still converting, embedding or answering are not waited for."""
    request(why)
    wait_quiet(seconds)
    hard_exit(code)


def hard_exit(code: int) -> NoReturn:
    """Flush stdout/stderr and end the process now. A normal interpreter exit would wait for
    (or abort inside) the model's batch still running on a daemon thread."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def exit_on_signals() -> None:
    """A server's SIGTERM/SIGINT: stop any sync and exit 0 once its write in flight is done."""
    on_signals(lambda signum: threading.Thread(
        target=exit_when_quiet, args=(f"{signal.Signals(signum).name} received",), name="stop-exit",
        daemon=True).start())


def on_signals(handler: Callable[[int], None] | None = None,
               signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
    """Make SIGTERM/SIGINT request a stop (then call `handler(signum)`); a second Ctrl-C interrupts at once."""
    def handle(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT and _requested.is_set():
            raise KeyboardInterrupt
        request(f"{signal.Signals(signum).name} received")
        if handler is not None:
            handler(signum)

    for sig in signals:
        signal.signal(sig, handle)


def reset() -> None:
    """Forget a requested stop (tests run several syncs in one process)."""
    _requested.clear()
    _reason.clear()
