"""A long sync's indexing in rounds of SYNC_ROUND_FILES files, each in a child process of its own, so the
sync's memory does not grow with the files it has seen.

A first sync's RSS rose by ~2-5 KB for every file indexed, outside the appliance's live Python objects
and mostly outside LanceDB's writes (docs/BENCHMARKS.md): native memory that no cache setting or
malloc_trim gave back. Whatever holds it, it goes back to the system with the process: each round
converts, cuts, embeds and writes its files in a fresh child, commits them, reports and exits; the
next round's child folds those rows into the indexes on a thread beside its own writes (`_fold`). The
children are forked from a fork server that imported the indexing code once (`forkserver`: this
process holds LanceDB's and onnxruntime's threads, which a plain `fork` would copy in a broken state).

This process keeps the sync lock, the plan (what each file needs) and the report: a child reports its
progress, each write, and at the end its tally, over a pipe. A child that dies without reporting (killed,
out of memory, a crash in native code) costs the files of its round not yet written: they are reported
as failed, named, and the next sync indexes them again, while the next round goes on. An error the
child raises (a full disk, a damaged index) ends the sync as it would in one process. A stop or a
cancel of this sync stops the children the same way (SIGTERM: a write in flight finishes).
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import multiprocessing as mp
import os
import pickle
import signal
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.config import Settings
from appliance.embed import Embedder, tokenizer_at
from appliance.errors import ApplianceError
from appliance.ingest.discover import FoundFile
from appliance.ingest.snapshots import Member
from appliance.platform import native_memory, stopping
from appliance.results import FileProblem, Tally
from appliance.storage.tables import SourceRow
from appliance.storage.writes import SEGMENTS_MAX_MID_RUN
from appliance.sync.indexing import IndexBatch, LocalIndexer, embedding
from appliance.sync.pipeline import TICK_S, Work

if TYPE_CHECKING:
    from appliance.core import Resources

ROUND_DIED = "indexing_process_died"
"""The code of a file whose round's process ended before writing it (the next sync indexes it)."""
COUNTS = ("added", "updated", "chunks", "embedded", "reused", "files_stored", "chunks_cut")
"""What a round counts that the sync's report adds up (its lists: `failed`)."""
PR_SET_PDEATHSIG = 1
FOLD_READ_AHEAD = {"LANCE_DEFAULT_BATCH_SIZE": "256", "LANCE_IO_THREADS": "2"}
"""LanceDB's read-ahead in a round's process, over an index on local disk. What a fold holds while it reads
(the fragments it compacts, an index it merges) is mostly read-ahead, batches of 8,192 rows on several IO
threads by default: when a fold still rewrote the whole table, at 100,000 chunks it peaked 490 MB above the
process before it, 220 MB with these settings (2.0 s instead of 1.8). A round's process only writes, so
reading less ahead costs it nothing a query would feel; a variable the user set is kept."""
TOKENIZER_PRELOAD = "MINIRAG_ROUNDS_TOKENIZER"
"""The model's tokenizer file, named to the fork server (_fork_server_environment), which parses it as it
imports this module (_preload_tokenizer)."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Started:
    """A round's running process and the parent's end of its pipe."""

    child: BaseProcess
    conn: Connection


@dataclass(frozen=True)
class Round:
    """What one child indexes: its files in path order, the snapshot members among them, what the index
    held for them, and how to embed (the parent's model, rebuilt in the child; `reuse` of stored vectors)."""

    settings: Settings
    embedder: Embedder | None
    todo: list[tuple[FoundFile, str]]
    members: dict[Path, Member]
    known: dict[str, SourceRow]
    reuse: bool
    fold_first: bool
    """Fold what the previous round wrote into the indexes, on a thread beside this round's work."""


def split(todo: list[tuple[FoundFile, str]], members: dict[Path, Member],
          size: int) -> list[list[tuple[FoundFile, str]]]:
    """`todo` in rounds of about `size` files, in order; a dated snapshot sequence stays in one round
    (its members are written as one unit), so a round may be larger."""
    units: dict[str, list[tuple[FoundFile, str]]] = {}
    for item in todo:
        member = members.get(item[0].path)
        units.setdefault(member.group if member else f"\0{item[0].path}", []).append(item)
    rounds: list[list[tuple[FoundFile, str]]] = [[]]
    for unit in units.values():
        if rounds[-1] and len(rounds[-1]) + len(unit) > size:
            rounds.append([])
        rounds[-1].extend(unit)
    return [r for r in rounds if r]


def default_indexer(settings: Settings) -> RoundsIndexer:
    """A sync's indexer on this machine: rounds of SYNC_ROUND_FILES files in child processes, or everything
    in the syncing process when that setting is 0 or the files are fewer."""
    return RoundsIndexer(settings.sync_round_files)


class RoundsIndexer:
    """Indexes a batch of more than `round_files` files in rounds, each in a child process (the module);
    a smaller batch in this process (LocalIndexer)."""

    def __init__(self, round_files: int) -> None:
        self.round_files = round_files
        self._children: list[BaseProcess] = []
        """The rounds' processes running: the round's, and the next one started ahead of it or the one before
        it as that exits."""

    def index(self, batch: IndexBatch) -> None:
        if self.round_files <= 0 or len(batch.todo) <= self.round_files:
            LocalIndexer().index(batch)
            return
        parts = split(batch.todo, batch.members, self.round_files)
        jobs = [Round(batch.core.settings, batch.core.embedder, todo,
                      {f.path: batch.members[f.path] for f, _ in todo if f.path in batch.members},
                      {str(f.path): batch.known[str(f.path)] for f, _ in todo if str(f.path) in batch.known},
                      batch.reuse, fold_first=number > 0)
                for number, todo in enumerate(parts)]
        names = [f"round {number} of {len(jobs)}" for number in range(1, len(jobs) + 1)]
        done = 0
        ahead: _Started | None = None
        """The next round's process, started by _follow once this round's files are all embedded."""
        stopping.add_hook(self._stop)
        try:
            for number, job in enumerate(jobs):
                stopping.check()
                started = ahead or self._start(job, names[number])
                following = (jobs[number + 1], names[number + 1]) if number + 1 < len(jobs) else None
                ahead = self._follow(job, names[number], started, batch, done, len(batch.todo), following)
                self._join(keep=1 if ahead else 0)  # this round's process, which exits once it reported
                done += len(job.todo)
        except BaseException:
            self._stop()
            self._join(keep=0)
            raise
        finally:
            stopping.remove_hook(self._stop)

    def _stop(self) -> None:
        """A stop hook (on a thread of its own): each child stops as a sync stops, its write in flight done."""
        for child in list(self._children):
            with contextlib.suppress(OSError, ValueError):
                if child.pid is not None and child.is_alive():
                    os.kill(child.pid, signal.SIGTERM)

    def _join(self, keep: int) -> None:
        """Wait for the children but the last `keep`."""
        while len(self._children) > keep:
            child = self._children.pop(0)
            child.join()
            if child.exitcode:
                log.warning("%s ended with exit code %s after its round was written", child.name, child.exitcode)

    def _start(self, job: Round, name: str) -> _Started:
        """A round's process, started; the parent's end of its pipe."""
        ctx = _context()
        ours, theirs = ctx.Pipe(duplex=False)
        # Not daemonic: a daemonic process may not start processes, and the round's converter pool does.
        # The child ends with this process all the same (PR_SET_PDEATHSIG in _child_main).
        child = ctx.Process(target=_child_main, args=(theirs, job), name=f"minirag-sync {name}", daemon=False)
        with _fork_server_environment(job.embedder):
            child.start()
        self._children.append(child)
        theirs.close()
        return _Started(child, ours)

    def _follow(self, job: Round, name: str, started: _Started, batch: IndexBatch, done: int, total: int,
                following: tuple[Round, str] | None) -> _Started | None:
        """One round's process to its end: its progress and tally folded into `batch.report` as they come.
        Once it has embedded all its files (only its last writes left), the `following` round starts (returned),
        so that one converts and embeds its first files while this one writes its last: the gap between the
        rounds' writes was a round's start (scripts/bench_scale.py --flat)."""
        ahead = None
        report = batch.report
        base = {key: getattr(report, key) for key in COUNTS}
        written: set[str] = set()
        stored = (0,) * len(COUNTS)  # the child's counts at its last write
        child = started.child
        outcome = None
        converted: tuple[int, str] = (0, "")  # the child's files converted, the last one's path
        with started.conn as ours:
            for message in _messages(ours, child):
                kind = message[0]
                if kind in ("progress", "wrote"):
                    for key, value in zip(COUNTS, message[2], strict=True):
                        setattr(report, key, base[key] + value)
                    if kind == "wrote":
                        written.update(message[1])
                        stored = message[2]
                    else:
                        converted = (message[1], message[3])
                    # a write is progress too: while the next file converts (an hour, at worst), the files
                    # written before it are reported written
                    if batch.on_file is not None:
                        batch.on_file(done + converted[0], total, converted[1])
                elif kind == "embedded_all":
                    if following is not None and not stopping.requested():
                        ahead = self._start(*following)
                else:
                    outcome = message
                    break
        if outcome is None:  # died without a word: its unwritten files are reported, the next round goes on
            child.join()
            for key, value in zip(COUNTS, stored, strict=True):
                setattr(report, key, base[key] + value)
            report.added = base["added"] + sum(1 for sid in written if sid not in job.known)
            report.updated = base["updated"] + sum(1 for sid in written if sid in job.known)
            why = (f"the indexing process of {name} (pid {child.pid}) ended with exit code {child.exitcode} "
                   "before this file was written; the next sync indexes it again")
            report.failed.extend(FileProblem(str(f.path), ROUND_DIED, why) for f, _ in job.todo
                                 if str(f.path) not in written)
            return ahead
        kind, payload = outcome
        if kind == "error":
            raise payload
        if kind == "stopped":
            raise stopping.stopped_error() if stopping.requested() else stopping.Stopped(payload)
        tally: Tally = payload
        for key in COUNTS:
            setattr(report, key, base[key] + getattr(tally, key))
        report.failed.extend(tally.failed)
        return ahead


warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)
warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
"""LanceDB resets its runtime in a forked child and warns that a fork in the middle of one of its operations
could deadlock, and pylance warns before every fork of a process that imported it (a `minirag sync` in rounds
printed it once a round); the fork server (below) imports both but never runs an operation."""


def _context() -> ForkServerContext:
    """Children forked from a fork server that imported this module once: a round starts in a fraction of a
    second instead of the 5-15 s of a fresh interpreter's imports (2 busy cores; LanceDB's alone 5 s). The
    server never opens a table or runs the model, so no operation is in flight when it forks. It imports pylance
    too (a fold's, storage/writes.py), which starts no thread: the pages its loading wrote are then shared by
    the server and each round, not written again in every round. It also parses the model's tokenizer
    (_fork_server_environment), which each round would otherwise spend ~1 s on before cutting its first file: a
    tokenizer that has not encoded yet has started no thread either."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__, "appliance.core", "lance"])
    return ctx


@contextlib.contextmanager
def _fork_server_environment(embedder: Embedder | None) -> Iterator[None]:
    """This process's environment while a round's process starts (and with the first, the fork server, which
    reads it as it starts): TOKENIZER_PRELOAD set, which no other process started from here needs, and jemalloc
    not preloaded, so the rounds index under glibc's bounded allocator (native_memory)."""
    tokenizer_file = getattr(embedder, "tokenizer_file", None)
    if tokenizer_file is not None:
        with contextlib.suppress(ApplianceError):  # not baked: the round reports it as any sync would
            os.environ[TOKENIZER_PRELOAD] = str(tokenizer_file())
    preload = os.environ.pop("LD_PRELOAD", None)
    os.environ.update(native_memory.without_jemalloc({"LD_PRELOAD": preload} if preload else {}))
    try:
        yield
    finally:
        os.environ.pop(TOKENIZER_PRELOAD, None)
        os.environ.pop("LD_PRELOAD", None)
        if preload is not None:
            os.environ["LD_PRELOAD"] = preload


def _preload_tokenizer() -> None:
    """In the fork server, as it imports this module: parse the tokenizer TOKENIZER_PRELOAD names (tokenizer_at
    keeps it for the process, so each round forked from the server finds it parsed). The server then ends at
    once when the sync does, without tearing the tokenizer down (up to ~3 s of freeing its pieces, during which
    a stopped sync would leave it running)."""
    path = os.environ.get(TOKENIZER_PRELOAD)
    if path:
        with contextlib.suppress(Exception):  # a round parses it itself then
            tokenizer_at(Path(path))
            server = os.getpid()
            atexit.register(lambda: os._exit(0) if os.getpid() == server else None)  # rounds end by os._exit


_preload_tokenizer()


def _messages(conn: Connection, child: BaseProcess) -> Iterator[tuple[Any, ...]]:
    """What the child sends, until it sends its outcome or its end of the pipe closes."""
    while True:
        if not conn.poll(TICK_S):
            if not child.is_alive() and not conn.poll(0):
                return
            continue
        try:
            yield conn.recv()
        except (EOFError, OSError):
            return


# ---- the child ---------------------------------------------------------------------------------
class _Sender:
    """The child's end of the pipe: the writer thread and the main thread both send, one message at a time."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self.conn.send(message)


class _RoundBatch(IndexBatch):
    """The round's batch: each write is also reported to the parent, and so is the end of its embedding."""

    sender: _Sender | None = None

    def write(self, works: list[Work]) -> None:
        super().write(works)
        if self.sender is not None:
            self.sender.send(("wrote", [s.source_id for w in works for s in w.sources], _counts(self.report)))

    def embedded_all(self) -> None:
        if self.sender is not None:
            with contextlib.suppress(OSError):  # the parent is gone: this process ends with it
                self.sender.send(("embedded_all",))


def _counts(tally: Tally) -> tuple[int, ...]:
    return tuple(getattr(tally, key) for key in COUNTS)


def _child_main(conn: Connection, job: Round) -> None:
    """Index the round's files, then send ("done", tally), ("stopped", why) or ("error", exception)."""
    with contextlib.suppress(Exception):  # Linux: end with the parent, which holds the sync lock
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it stops this child by SIGTERM
    stopping.on_signals(signals=(signal.SIGTERM,))
    bound_read_ahead(job.settings)  # LanceDB reads these when it first opens a table, after this
    from appliance.core import Resources

    tally = Tally()
    sender = _Sender(conn)
    try:
        core = Resources(job.settings, embedder=job.embedder)

        def on_file(converted: int, _total: int, path: str) -> None:
            sender.send(("progress", converted, _counts(tally), path))

        batch = _RoundBatch(core, job.todo, job.members, job.known, tally, on_file,
                            embedding(core, tally, reuse=job.reuse), job.reuse)
        batch.sender = sender
        fold = threading.Thread(target=_fold, args=(core,), name="sync-fold", daemon=True)
        if job.fold_first:
            fold.start()
        LocalIndexer().index(batch)
        if job.fold_first:
            fold.join()
        sender.send(("done", tally))
    except stopping.Stopped as exc:
        with contextlib.suppress(OSError):
            sender.send(("stopped", str(exc)))
    except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
        with contextlib.suppress(OSError):
            sender.send(("error", _sendable(exc)))
    finally:
        conn.close()


def bound_read_ahead(settings: Settings) -> None:
    """FOLD_READ_AHEAD in this process's environment, for an index on local disk (in a bucket, requests in
    parallel are what makes reads fast)."""
    if settings.bucket is None:
        for name, value in FOLD_READ_AHEAD.items():
            os.environ.setdefault(name, value)


def _fold(core: Resources) -> None:
    """Fold the rows the rounds before wrote into the indexes (when due), beside this round's own converting,
    embedding and writing (IndexWriter.refresh_indexes takes no write lock while it folds), in a fresh
    process, so what it allocates leaves with the round. A failed fold is left to the next one (every round
    and the sync's end fold what is due)."""
    try:
        core.index.writes.refresh_indexes(segments_max=SEGMENTS_MAX_MID_RUN)
    except stopping.Stopped:
        pass
    except Exception:
        log.warning("folding the rows of the rounds before failed; left to the next fold", exc_info=True)


def _sendable(exc: Exception) -> Exception:
    """`exc`, or a RuntimeError naming it where it does not survive pickling."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any failure to pickle or rebuild
        return RuntimeError(f"{type(exc).__name__}: {exc}")
