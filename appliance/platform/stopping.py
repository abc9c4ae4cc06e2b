"""A prompt, clean stop of a running sync: SIGTERM, Ctrl-C, the MCP client leaving.

`request(reason)` is safe to call from a signal handler. It marks the process as
stopping and, on a thread of its own (a signal handler must not take locks the
interrupted code may hold), runs the stop hooks of everything registered with
`add_hook`: the conversion pool kills its worker processes (a slow PDF is not
waited for), the embed/write pipeline abandons the chunks still waiting for the
model and lets only the LanceDB write in flight finish. The sync then unwinds
with `Stopped`; what it did not write, the next sync does (a write interrupted
anyway, by a kill, is repaired by the next sync too).

`wait_quiet(seconds)` waits until nothing registered is left running: what a
process does between a stop and exiting.

A `Scope` is the same stop for one piece of work instead of the whole process: a
background job (appliance.sync.jobs) runs inside `scope.active()`, so what it registers
with `add_hook` there also runs on `scope.cancel()`, and `requested()`/`check()` on
its thread say so too. Cancelling a job therefore stops it exactly like a process
stop would, and nothing else.
"""
from __future__ import annotations

import contextvars
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


class Cancelled(Stopped):
    """The work was cancelled on request (its job's Scope), not because the process stops."""


class Scope:
    """One job's own stop: `cancel()` runs the hooks registered inside `active()`, and
    `requested()` is true on the threads running inside it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.why = ""
        self._hooks: dict[Callable[[], None], Callable[[], None]] = {}
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.why)

    def cancel(self, why: str = "cancelled") -> None:
        """Ask the work to stop (returns at once; its hooks run on a thread of their own)."""
        with self._lock:
            if self._event.is_set():
                return
            self.why = why
            self._event.set()
            hooks = list(self._hooks.values())
        threading.Thread(target=_run_all, args=(hooks,), name="cancel-hooks", daemon=True).start()

    @contextmanager
    def active(self) -> Iterator[Scope]:
        token = _scope.set(self)
        try:
            yield self
        finally:
            _scope.reset(token)

    def _add(self, hook: Callable[[], None]) -> bool:
        with self._lock:
            self._hooks[hook] = hook
            return self._event.is_set()

    def _remove(self, hook: Callable[[], None]) -> None:
        with self._lock:
            self._hooks.pop(hook, None)


_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("stopping_scope", default=None)
_hook_scopes: dict[Callable[[], None], Scope] = {}


def current_scope() -> Scope | None:
    return _scope.get()


def requested() -> bool:
    """A stop of the process, or a cancel of the job this thread runs."""
    scope = _scope.get()
    return _requested.is_set() or (scope is not None and scope.cancelled)


def reason() -> str | None:
    if _reason:
        return _reason[0]
    scope = _scope.get()
    return scope.why if scope is not None and scope.cancelled else None


def check() -> None:
    """Raise Stopped (Cancelled for a cancelled job) once a stop was requested, at a point where leaving is safe."""
    if _requested.is_set():
        raise Stopped(reason() or "stopping")
    scope = _scope.get()
    if scope is not None and scope.cancelled:
        raise Cancelled(scope.why)


def stopped_error() -> Stopped:
    """What to raise for the stop `requested()` reports."""
    scope = _scope.get()
    if not _requested.is_set() and scope is not None and scope.cancelled:
        return Cancelled(scope.why)
    return Stopped(reason() or "stopping")


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
    _run_all(hooks)


def _run_all(hooks: list[Callable[[], None]]) -> None:
    for hook in hooks:
        with suppress(Exception):  # one failing hook must not keep the others from running
            hook()


def add_hook(hook: Callable[[], None], *, scoped: bool = True) -> None:
    """Run `hook` when a stop is requested (at once if one already was) until `remove_hook(hook)`;
    inside a job's Scope (unless `scoped=False`), also when that job is cancelled."""
    scope = _scope.get() if scoped else None
    with _cond:
        _hooks[hook] = hook
        if scope is not None:
            _hook_scopes[hook] = scope
    if _requested.is_set() or (scope is not None and scope._add(hook)):
        hook()


def remove_hook(hook: Callable[[], None]) -> None:
    with _cond:
        _hooks.pop(hook, None)
        scope = _hook_scopes.pop(hook, None)
        _cond.notify_all()
    if scope is not None:
        scope._remove(hook)


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
