"""Conversion in worker processes, each file under a time and a memory limit.

Parsers for PDF, Office and images are large C and Python code bases fed with
untrusted bytes: a zip bomb, a pathological PDF or a 30,000 x 30,000 pixel PNG must
cost one named error, never the server. So:

* workers are started with the `spawn` context (the parent may hold onnxruntime
  threads, which `fork` would copy in a broken state) and import only the ingest
  modules: markitdown, pypdfium2, Pillow - never fastembed or lancedb;
* each worker limits its own address space with RLIMIT_AS (inherited by the
  tesseract processes it starts) and runs in its own process group. A parse that reaches
  the limit does not always end in a MemoryError: Python can limp along at its edge for
  minutes, every allocation a failed system call. So the parent watches the worker, and one
  held at the limit while spending most of its time in the kernel is killed and reported as
  over the memory limit; a worker that keeps most of its limit mapped after a file (freed
  memory an allocator holds on to) is replaced, so the next file does not start at the edge;
* the parent checks names (`~$` lock files, dot-files) and MAX_FILE_SIZE with stat()
  before a worker ever opens the file;
* plain text (DECODED_HERE) needs no parser and is decoded in the calling process;
  the workers start when the first file that does need one comes;
* a file that outlives `timeout_s` gets its worker's whole process group killed
  (SIGKILL) and the worker replaced; a worker that dies (segfault, out of memory,
  killed) is reported as ConversionFailed naming the file, and replaced too. A scan
  reports each page whose text it recognised, and each restarts its clock, up to
  SCAN_TIMEOUT_SPAN times `timeout_s` in all: a 300-page scan takes longer than any parse should.

A stop of the process (`appliance.platform.stopping`: SIGTERM, the MCP client leaving) kills
every worker at once instead of waiting for the file it converts; `imap` then raises
Stopped and the files not converted are left to the next sync.

The pool is thread-safe: `convert` may be called from several threads at once, and
`imap` keeps a bounded number of files in flight, yielding results in input order so
the caller can embed early files while later ones are still converting.

Bytes from outside the roots - an `ingest_data` content of any format, a page
`ingest_url` fetched - are untrusted too: `convert_data` and `convert_page` send them
to a worker under the same limits, so the server process never parses them. A
cancelled job (stopping.Scope) kills the worker converting its content.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from appliance.chunks import Converted
from appliance.errors import ApplianceError, ConversionFailed
from appliance.ingest.convert import check_name, check_size, to_markdown
from appliance.ingest.failures import ConversionMemoryLimit, ConversionTimeout, WorkerCrashed
from appliance.ingest.formats import TEXT_EXTENSIONS
from appliance.ingest.ocr import OcrConfig, report_pages_to
from appliance.platform import stopping
from appliance.platform.proc_stat import stat_fields

if TYPE_CHECKING:
    from appliance.ingest.fetch import FetchedPage

_MB = 1 << 20
DECODED_HERE = TEXT_EXTENSIONS | {".json"}
"""Plain text is decoded, not parsed (an encoding guessed from a 64 KB sample, front matter,
inline images dropped), so it is converted in the calling process: no worker round trip, and
no worker start when a sync has nothing else. What the chunker then does with the text runs
in this process for every format anyway."""
WORKER_NICE = 10
"""Workers yield the CPU to the process that started them: a hostile document burning a core
for CONVERT_TIMEOUT must not slow the server's queries (2.3 s at the same priority on 2 cores)."""
LIMIT_MARGIN = 32 * _MB
LIMIT_HELD_S = 1.0
"""A worker whose address space stays within LIMIT_MARGIN of RLIMIT_AS for LIMIT_HELD_S, with more system than
user time meanwhile, is over its memory limit: a 16 MB HTML table's parse held there for minutes in about two runs
of three (tests/integration/test_isolation.py), at ~3 system ticks to one of user time, where the rest ended in a
MemoryError within seconds. A healthy process near its cap reuses what it freed and stays in user space."""
MEMORY_EXIT = 86
"""A worker's exit code when a conversion (or sending its result) ran out of memory under RLIMIT_AS."""
WATCH_EVERY_S = 0.25
"""How often the parent looks at a converting worker."""
KEPT_SHARE = 0.75
"""A worker whose address space is above this share of its limit after a file is replaced before the next."""
SCAN_TIMEOUT_SPAN = 20
"""The most a file whose pages OCR keeps recognising may take, in CONVERT_TIMEOUTs (an hour by default): OCR
takes ~1.5-4 s a page, so a single CONVERT_TIMEOUT failed scans of more than ~50-100 pages, while a file of
endless blank pages must still end."""
STARTUP_TIMEOUT_S = 120.0
"""How long a fresh worker may take to import its parsers (about 3 s measured)."""


def _limit_memory(memory_bytes: int) -> None:
    if memory_bytes and memory_bytes > 0:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _memory_limit(path: str | Path, memory_bytes: int) -> ConversionMemoryLimit:
    return ConversionMemoryLimit(
        f"{path}: conversion exceeded the memory limit of {memory_bytes // _MB} MB (CONVERT_MEMORY_MB)")


class _Usage(NamedTuple):
    """A process's address space in bytes (what RLIMIT_AS caps) and its user and system CPU time in ticks."""

    space: int
    user: int
    system: int


def _usage(pid: int | None) -> _Usage:
    """`pid`'s usage (zeros when it cannot be read)."""
    return _Usage(*(stat_fields(pid, 23, 14, 15) or (0, 0, 0)))


def _out_of_memory(exc: BaseException, memory_bytes: int) -> bool:
    """Whether a conversion failed of the memory limit: a MemoryError, or any error raised while the worker's
    address space is at the limit (a C library that cannot allocate its own error raises SystemError, "error
    return without exception set"; a wrapper may re-raise it as something else). A worker starts each file
    well below its limit (KEPT_SHARE), so a failure at the limit is the limit's."""
    try:
        return isinstance(exc, MemoryError) or \
            0 < memory_bytes - LIMIT_MARGIN <= _usage(os.getpid()).space
    except MemoryError:
        return True


def _failure(path: Path, exc: BaseException) -> ConversionFailed:
    """What a converter raised, as this file's failure."""
    return ConversionFailed(f"{path}: {type(exc).__name__}: {exc}"[:500])


Task = str | tuple[Any, ...]
"""What a worker is sent: a file's path, ("data", content, format, title) or ("page", FetchedPage, max_bytes)."""


def _convert_task(task: Task, ocr: OcrConfig | None, max_file_size: int) -> Converted:
    """In the worker: the conversion a task names."""
    if isinstance(task, str):
        return to_markdown(Path(task), ocr=ocr, max_file_size=max_file_size)
    if task[0] == "data":
        from appliance.ingest.convert import convert_data

        return convert_data(task[1], task[2], title=task[3])
    from appliance.ingest.fetch import page_to_converted

    return page_to_converted(task[1], max_bytes=task[2])


def _worker_main(conn: Connection, ocr: OcrConfig | None, max_file_size: int, memory_bytes: int) -> None:
    """Loop in the worker: receive a task, send back ("ok", Converted) or ("err", error)."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # own process group: a kill takes tesseract children along
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    os.environ["OMP_THREAD_LIMIT"] = "1"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    from appliance.ingest import fetch  # noqa: F401 - what a page task needs, imported before the limit
    from appliance.ingest.convert_markitdown import load_converters

    load_converters()  # the heavy imports happen before the memory limit
    report_pages_to(lambda: conn.send(("page", None)))  # progress, before this task's result
    _limit_memory(memory_bytes)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        task, path = msg
        try:
            try:
                result: tuple[str, object] = ("ok", _convert_task(task, ocr, max_file_size))
            except BaseException as exc:  # noqa: BLE001 - anything a parser throws is this file's failure
                if _out_of_memory(exc, memory_bytes):
                    raise MemoryError from None
                result = ("err", exc if isinstance(exc, ApplianceError) else _failure(path, exc))
            conn.send(result)
        except MemoryError:
            # Nothing is built to report it: the parse's objects may still fill the limit (a DOM's parent and
            # child links keep it alive until the collector runs), and a C library may be left in a bad state.
            # The exit code says it (ConvertPool._wait), and the pool starts a fresh worker.
            os._exit(MEMORY_EXIT)


class _Worker:
    def __init__(self, ctx: SpawnContext, ocr: OcrConfig | None, max_file_size: int, memory_bytes: int) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=_worker_main,
            args=(child, ocr, max_file_size, memory_bytes),
            daemon=True,
            name="minirag-convert",
        )
        self.proc.start()
        child.close()
        self.tasks = 0
        self.ready = False

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait for the worker's imports to finish, so start-up is not billed to a file."""
        if self.ready:
            return True
        try:
            if self.conn.poll(timeout_s):
                status, _ = self.conn.recv()
                self.ready = status == "ready"
        except (EOFError, OSError, ValueError):
            self.ready = False
        return self.ready

    def kill(self) -> None:
        pid = self.proc.pid
        if pid is not None and self.proc.is_alive():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.proc.join(timeout=5)
        with contextlib.suppress(OSError):
            self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        self.proc.join(timeout=2)
        if self.proc.is_alive():
            self.kill()
        else:
            with contextlib.suppress(OSError):
                self.conn.close()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # the worker reports it by name


class _Turns:
    """Idle workers handed out strictly in the order tickets were drawn.

    `imap` draws a ticket when it submits a file, so the files get workers in input
    order, whichever of their threads runs first: a later file (perhaps one that never
    ends) cannot take the worker an earlier one waits for, which `imap`'s in-order
    results would then wait on. A drawn ticket is either taken or dropped, never
    forgotten, or every later ticket would wait forever.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._idle: deque[_Worker] = deque()
        self._drawn = 0
        self._serving = 0
        self._dropped: set[int] = set()
        self._closed = False

    def draw(self) -> int:
        with self._cond:
            self._drawn += 1
            return self._drawn - 1

    def take(self, ticket: int) -> _Worker | None:
        """The next idle worker once every earlier ticket has been served; None once closed."""
        with self._cond:
            while not self._closed and (ticket != self._serving or not self._idle):
                self._cond.wait()
            if self._closed:
                return None
            self._advance()
            return self._idle.popleft()

    def drop(self, ticket: int) -> None:
        """Give up a ticket that will not take a worker (its file was refused or cancelled)."""
        with self._cond:
            if ticket >= self._serving:
                self._dropped.add(ticket)
                if ticket == self._serving:
                    self._advance(served=False)

    def _advance(self, served: bool = True) -> None:
        if served:
            self._serving += 1
        while self._serving in self._dropped:
            self._dropped.discard(self._serving)
            self._serving += 1
        self._cond.notify_all()

    def put(self, w: _Worker) -> None:
        with self._cond:
            self._idle.append(w)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class ConvertPool:
    """Worker processes that run `to_markdown` with per-file time and memory limits.

    `memory_bytes` caps each worker's address space (RLIMIT_AS), not its RSS: the parser
    imports alone map about 480 MB (markitdown pulls in magika and onnxruntime), so
    limits below ~700 MB leave little for the document; 2 GB suits two workers on a
    4 GB machine. `timeout_s` is per file; a scan's clock restarts at each page OCR recognises, up to
    `scan_span` times `timeout_s` in all (SCAN_TIMEOUT_SPAN).
    """

    def __init__(
        self,
        *,
        workers: int,
        timeout_s: float,
        memory_bytes: int,
        ocr: OcrConfig | None,
        max_file_size: int,
        max_tasks_per_worker: int = 200,
        scoped: bool = True,
        scan_span: int = SCAN_TIMEOUT_SPAN,
    ) -> None:
        """`scoped=False`: a pool that outlives the job creating it (the server's pool for untrusted
        content) is not aborted when that job is cancelled; only its task is."""
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.timeout_s = float(timeout_s)
        self.memory_bytes = int(memory_bytes)
        self.ocr = ocr
        self.max_file_size = int(max_file_size)
        self.max_tasks_per_worker = max_tasks_per_worker
        self.scan_span = max(1, scan_span)
        self._ctx = mp.get_context("spawn")
        self._turns = _Turns()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = self._aborted = False
        self.restarts = 0
        """Workers replaced after a timeout, crash or memory failure (for status and tests)."""
        self._started = False
        self._start_lock = threading.Lock()
        stopping.add_hook(self.abort, scoped=scoped)

    # -------------------------------------------------------------- workers

    def _start_workers(self) -> None:
        """Start the workers when the first file that needs a parser comes: a sync of text files
        alone never pays their start (about 3 s of imports each)."""
        with self._start_lock:
            if self._started:
                return
            spawned: list[_Worker] = []
            try:
                for _ in range(self.workers):
                    spawned.append(self._spawn())
            finally:  # workers that did start serve; with none, the next file tries again
                self._started = bool(spawned)
                for w in spawned:
                    self._turns.put(w)

    def _spawn(self) -> _Worker:
        w = _Worker(self._ctx, self.ocr, self.max_file_size, self.memory_bytes)
        with self._lock:
            self._all.add(w)
        return w

    def _retire(self, w: _Worker, *, replace: bool, kill: bool, failure: bool = True) -> None:
        if kill:
            w.kill()
        else:
            w.stop()
        with self._lock:
            self._all.discard(w)
            closed = self._closed
        if replace and not closed:
            if failure:
                self.restarts += 1
            self._turns.put(self._spawn())

    @property
    def closed(self) -> bool:
        return self._closed

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for w in self._all if w.proc.pid is not None]

    # -------------------------------------------------------------- conversion

    def convert(self, path: Path, ticket: int | None = None) -> Converted:
        """Convert one file in a worker; raises ApplianceError subclasses.

        `ticket` (from `imap`) is this file's place in the queue for a worker; without
        one the call queues behind every file already waiting.
        """
        path = Path(path)
        if path.suffix.lower() in DECODED_HERE:
            if ticket is not None:
                self._turns.drop(ticket)
            return self._decode(path)
        if ticket is None:
            ticket = self._turns.draw()
        try:
            if self._closed:
                raise RuntimeError("ConvertPool is closed")
            check_name(path)
            check_size(path, self.max_file_size)
        except BaseException:
            self._turns.drop(ticket)
            raise
        return self._run(self._worker_for(ticket), str(path), str(path))

    def convert_data(self, content: str, fmt: str, *, title: str | None, label: str) -> Converted:
        """`convert.convert_data` in a worker (ingest_data's content); `label` names it in errors."""
        return self._convert_task(("data", content, fmt, title), label)

    def convert_page(self, page: FetchedPage, *, max_bytes: int) -> Converted:
        """`fetch.page_to_converted` in a worker (a page ingest_url fetched)."""
        return self._convert_task(("page", page, max_bytes), page.final_url)

    def _convert_task(self, task: Task, label: str) -> Converted:
        ticket = self._turns.draw()
        if self._closed:
            self._turns.drop(ticket)
            raise RuntimeError("ConvertPool is closed")
        return self._run(self._worker_for(ticket), task, label)

    def _worker_for(self, ticket: int) -> _Worker:
        """The worker whose turn `ticket` is (starting the workers first if none runs yet). A start that
        fails gives up the ticket, so the files queued behind it are not left waiting."""
        try:
            self._start_workers()
        except BaseException:
            self._turns.drop(ticket)
            raise
        w = self._turns.take(ticket)
        if w is None:
            if self._aborted:
                raise stopping.stopped_error()
            raise RuntimeError("ConvertPool is closed")
        return w

    def _decode(self, path: Path) -> Converted:
        if self._closed:
            raise RuntimeError("ConvertPool is closed")
        if self._aborted:
            raise stopping.stopped_error()
        try:
            return to_markdown(path, ocr=None, max_file_size=self.max_file_size)
        except ApplianceError:
            raise
        except Exception as exc:  # noqa: BLE001 - as a worker reports it: this file's failure
            raise _failure(path, exc) from None

    def _run(self, w: _Worker, task: Task, path: str) -> Converted:
        """Convert `task` (named `path` in errors) in worker `w`; a stop or a cancel of this
        thread's job (stopping.requested) kills the worker and raises Stopped."""
        if not w.wait_ready(STARTUP_TIMEOUT_S):
            code = w.proc.exitcode
            self._retire(w, replace=True, kill=True)
            raise WorkerCrashed(
                f"{path}: the converter process did not start (exit code {code}); "
                f"is the memory limit ({self.memory_bytes // _MB} MB) too small for the parsers?"
            )
        try:
            w.conn.send((task, path))
        except (OSError, ValueError) as exc:
            self._retire(w, replace=True, kill=True)
            raise WorkerCrashed(f"{path}: the converter process was gone before the file was sent") from exc
        except Exception as exc:  # a task that cannot be sent (pickling): the worker is fine, and goes back
            self._turns.put(w)
            raise ConversionFailed(f"{path}: could not be handed to a converter: {type(exc).__name__}: {exc}") from exc
        w.tasks += 1
        status, payload = self._wait(w, path)
        if w.tasks >= self.max_tasks_per_worker or \
                (self.memory_bytes and _usage(w.proc.pid).space > KEPT_SHARE * self.memory_bytes):
            # planned recycling bounds slow leaks, and the next file does not start at the memory limit's edge
            self._retire(w, replace=True, kill=False, failure=False)
        else:
            self._turns.put(w)
        if status == "ok":
            assert isinstance(payload, Converted)
            return payload
        if isinstance(payload, ApplianceError):
            raise payload
        raise ConversionFailed(f"{path}: {payload}")

    def _wait(self, w: _Worker, path: str) -> tuple[str, object]:
        """The worker's answer for `path`, within `timeout_s` of the start or of the last page it recognised,
        and SCAN_TIMEOUT_SPAN `timeout_s` in all; past that the worker is killed."""
        started = time.monotonic()
        last_call = started + self.timeout_s * self.scan_span
        deadline = min(started + self.timeout_s, last_call)
        pages = 0
        at_limit: tuple[float, _Usage] | None = None  # since when the worker is at its limit, and its usage then
        while True:
            if stopping.requested():
                self._retire(w, replace=True, kill=True, failure=False)
                raise stopping.stopped_error()
            left = deadline - time.monotonic()
            try:
                ready = w.conn.poll(max(0.0, min(left, WATCH_EVERY_S))) or not w.proc.is_alive()
            except (OSError, ValueError):
                ready = True
            if ready:
                try:
                    status, payload = w.conn.recv()
                except (EOFError, OSError, ValueError):
                    w.proc.join(timeout=5)
                    code = w.proc.exitcode
                    self._retire(w, replace=True, kill=True)
                    raise self._crash_error(path, code) from None
                if status != "page":
                    return status, payload
                pages += 1
                deadline = min(time.monotonic() + self.timeout_s, last_call)
                continue
            usage = _usage(w.proc.pid) if self.memory_bytes else None
            if usage is None or usage.space < self.memory_bytes - LIMIT_MARGIN:
                at_limit = None
            elif at_limit is None:
                at_limit = (time.monotonic(), usage)
            elif time.monotonic() - at_limit[0] >= LIMIT_HELD_S and \
                    usage.system - at_limit[1].system > usage.user - at_limit[1].user:
                self._retire(w, replace=True, kill=True)
                raise _memory_limit(path, self.memory_bytes)
            if left <= 0:
                self._retire(w, replace=True, kill=True)
                if deadline >= last_call and pages:
                    raise ConversionTimeout(
                        f"{path}: OCR stopped after {pages} pages and {time.monotonic() - started:.0f} s, "
                        f"{self.scan_span} times CONVERT_TIMEOUT ({self.timeout_s:g} s), the most a scan may "
                        "take; the worker was stopped")
                raise ConversionTimeout(
                    f"{path}: conversion timed out after {self.timeout_s:g} s (CONVERT_TIMEOUT"
                    + (f", since page {pages} was recognised" if pages else "") + "); the worker was stopped"
                )

    def _crash_error(self, path: str, exitcode: int | None) -> ConversionFailed:
        if exitcode == MEMORY_EXIT:
            return _memory_limit(path, self.memory_bytes)
        limit = f"{self.memory_bytes // _MB} MB" if self.memory_bytes else "none"
        if exitcode is not None and exitcode < 0:
            try:
                sig = signal.Signals(-exitcode).name
            except ValueError:
                sig = f"signal {-exitcode}"
            if sig in ("SIGKILL", "SIGSEGV", "SIGABRT", "SIGBUS"):
                return WorkerCrashed(
                    f"{path}: the converter process died ({sig}); it probably exceeded the memory "
                    f"limit ({limit}, CONVERT_MEMORY_MB) or hit a parser bug"
                )
            return WorkerCrashed(f"{path}: the converter process died ({sig})")
        return WorkerCrashed(f"{path}: the converter process exited unexpectedly (code {exitcode})")

    def imap(self, paths: Iterable[Path], *, in_flight: int | None = None,
             max_bytes: int | None = None) -> Iterator[tuple[Path, Converted | ApplianceError]]:
        """Yield (path, Converted or the error) in input order.

        At most `in_flight` files are submitted and not yet yielded and, with
        `max_bytes`, their sizes on disk add up to at most that (a larger file still
        goes alone). A deep look-ahead lets the workers run ahead of the caller
        through runs of small files, so one slow file does not leave the caller idle.
        """
        limit = in_flight or self.workers * 2
        pending: deque[tuple[Path, int, Future[Converted]]] = deque()
        held = 0
        it = iter(paths)
        upcoming: tuple[Path, int] | None = None
        with ThreadPoolExecutor(max_workers=limit, thread_name_prefix="convert") as ex:

            def fill() -> None:
                nonlocal held, upcoming
                while len(pending) < limit:
                    if upcoming is None:
                        try:
                            p = Path(next(it))
                        except StopIteration:
                            return
                        upcoming = (p, _size(p))
                    p, size = upcoming
                    if pending and max_bytes is not None and held + size > max_bytes:
                        return
                    ticket = self._turns.draw()
                    try:
                        fut = ex.submit(self.convert, p, ticket)
                    except BaseException:
                        self._turns.drop(ticket)
                        raise
                    pending.append((p, size, fut))
                    held += size
                    upcoming = None

            fill()
            while pending:
                p, size, fut = pending.popleft()
                try:
                    res: Converted | ApplianceError = fut.result()
                except ApplianceError as exc:
                    res = exc
                except Exception as exc:  # noqa: BLE001 - whatever a conversion raised is that file's failure
                    res = ConversionFailed(f"{p}: {type(exc).__name__}: {exc}")
                if self._aborted:  # the conversions were killed, not failed: nothing to report
                    raise stopping.stopped_error()
                held -= size
                fill()
                yield p, res

    # -------------------------------------------------------------- lifecycle

    def close(self) -> None:
        stopping.remove_hook(self.abort)
        for w in self._take_all():
            if w.proc.is_alive():
                w.stop()

    def abort(self) -> None:
        """Kill every worker now (a stop hook): what they were converting is dropped, and the pool,
        closed, no longer keeps a stopping process waiting (stopping.wait_quiet)."""
        self._aborted = True
        stopping.remove_hook(self.abort)
        for w in self._take_all():
            w.kill()

    def _take_all(self) -> list[_Worker]:
        """Close the pool (waking every thread waiting for a worker); its workers, once."""
        with self._lock:
            if self._closed:
                return []
            self._closed = True
            workers = list(self._all)
            self._all.clear()
        self._turns.close()
        return workers

    def __enter__(self) -> ConvertPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:  # noqa: SIM105 - not contextlib.suppress: at interpreter exit the module's globals may be None
            self.close()
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            pass
