"""Embedding and writing on threads of their own during a sync.

The embedding model is the bottleneck of a sync, so it gets a thread that does
nothing else: the caller receives conversions and cuts chunks, a writer thread
stores embedded rows, and the model never waits for either. Work waiting for
the model is bounded in chunks, which is what the model spends its time on;
a bound in files let a run of small files drain the queue before a slow PDF.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from appliance.platform import stopping

if TYPE_CHECKING:
    from appliance.storage.tables import SourceRow


TICK_S = 0.5
"""While put or close waits for the model, the caller's `tick` runs this often: the progress of
the chunks being written is published while no file is converted."""


@dataclass
class Work:
    """Rows of some sources, to be embedded (`texts[i]` gives `rows[i]` its vector) and
    then written in one write with the sources' records."""

    sources: list[SourceRow]
    rows: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def embed_with(self, embed: Callable[[list[str]], np.ndarray | Sequence[Any]]) -> None:
        """Give every row the vector of its text."""
        vectors = embed(self.texts) if self.texts else []
        for row, vector in zip(self.rows, vectors, strict=True):
            row["vector"] = vector


class EmbedWritePipeline:
    """put(work) … close(): embeds in order on one thread, writes on another.

    `tick()` is called on the caller's thread every TICK_S while put or close waits.

    `embed(texts)` returns one vector per text; `write(works)` stores several
    embedded works at once (the writer takes everything embedded since its last
    write); `embedded_all()`, on the model's thread, follows the last embedding of
    a closed pipeline (only writes are left then). The first error of either thread stops both and is raised by the
    next `put` or by `close`; leaving the `with` block on an error abandons the
    work not yet written, which the next sync redoes. A stop of the process
    (`appliance.platform.stopping`) abandons the waiting work at once: `put` and `close`
    raise Stopped after the write in flight, without waiting for the model.
    """

    def __init__(self, embed: Callable[[list[str]], np.ndarray | Sequence[Any]],
                 write: Callable[[list[Work]], None], *, ahead_chunks: int, batch_chunks: int,
                 tick: Callable[[], None] | None = None, embedded_all: Callable[[], None] | None = None) -> None:
        self._embed, self._write, self._tick, self._on_embedded_all = embed, write, tick, embedded_all
        self._ahead, self._batch = ahead_chunks, batch_chunks
        self._cond = threading.Condition()
        self._to_embed: deque[Work] = deque()
        self._waiting = 0
        self._to_write: deque[Work] = deque()
        self._closing = self._abandon = self._embedded_all = self._stopping = False
        self._error: BaseException | None = None
        self._threads = [threading.Thread(target=self._guard, args=(self._embed_loop,), name="sync-embed", daemon=True),
                         threading.Thread(target=self._guard, args=(self._write_loop,), name="sync-write", daemon=True)]
        for t in self._threads:
            t.start()

    def put(self, work: Work) -> None:
        """Queue work; blocks while `ahead_chunks` texts already wait (a larger work goes alone)."""
        while True:
            with self._cond:
                if self._cond.wait_for(lambda: self._error is not None or self._stopping or not self._to_embed
                                       or self._waiting + len(work.texts) <= self._ahead, self._tick_timeout()):
                    self._raise()
                    self._to_embed.append(work)
                    self._waiting += len(work.texts)
                    self._cond.notify_all()
                    return
            self._ticked()

    def close(self) -> None:
        """Wait until everything put is written; raise the first error of either thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        writer = self._threads[1]
        while self._tick is not None and not self._stopping and writer.is_alive():
            writer.join(TICK_S)
            self._ticked()
        self._join()
        self._raise()

    def _tick_timeout(self) -> float | None:
        return TICK_S if self._tick is not None else None

    def _ticked(self) -> None:
        """The caller's `tick`, on the caller's thread, while it waits (progress keeps moving)."""
        if self._tick is not None:
            self._tick()

    def stop(self) -> None:
        """Abandon what waits for the model; the write in flight finishes (a stop hook)."""
        with self._cond:
            self._stopping = self._abandon = True
            self._cond.notify_all()

    def __enter__(self) -> EmbedWritePipeline:
        stopping.add_hook(self.stop)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        try:
            if exc_type is not None:
                if issubclass(exc_type, stopping.Stopped):
                    self._stopping = True
                with self._cond:
                    self._abandon = True
                    self._cond.notify_all()
                self._join()
        finally:
            stopping.remove_hook(self.stop)

    # ---------------------------------------------------------------- threads

    def _guard(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            with self._cond:
                if self._error is None:
                    self._error = exc
                self._cond.notify_all()

    def _stopped(self) -> bool:
        return self._abandon or self._error is not None

    def _wait_for_work(self, queue: deque[Work], no_more: Callable[[], bool]) -> bool:
        """Under the lock: wait until `queue` holds work (True), or until it never will or
        the pipeline stopped (False: the thread ends)."""
        self._cond.wait_for(lambda: bool(queue) or no_more() or self._stopped())
        return bool(queue) and not self._stopped()

    def _embed_loop(self) -> None:
        drained = False
        try:
            while True:
                with self._cond:
                    if not self._wait_for_work(self._to_embed, lambda: self._closing):
                        drained = not self._stopped()  # else the queue is empty and closed
                        break
                    take = [self._to_embed.popleft()]
                    count = len(take[0].texts)
                    while self._to_embed and count + len(self._to_embed[0].texts) <= self._batch:
                        count += len(self._to_embed[0].texts)
                        take.append(self._to_embed.popleft())
                    self._waiting -= count
                    self._cond.notify_all()
                Work([], [r for w in take for r in w.rows], [t for w in take for t in w.texts]).embed_with(self._embed)
                with self._cond:
                    self._to_write.extend(take)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._embedded_all = True
                self._cond.notify_all()
        if drained and self._on_embedded_all is not None:
            self._on_embedded_all()

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                if not self._wait_for_work(self._to_write, lambda: self._embedded_all):
                    return
                take = list(self._to_write)
                self._to_write.clear()
            self._write(take)

    def _join(self) -> None:
        """The writer always (never leave a write half done); the model only when not stopping:
        its batch in flight is thrown away and the thread ends with the process."""
        embed, write = self._threads
        write.join()
        if not self._stopping:
            embed.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
        if self._stopping:
            raise stopping.stopped_error()
