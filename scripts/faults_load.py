#!/usr/bin/env python3
"""Load under a running sync, as in the container's daemon mode.

What runs is what `docker/supervisord-daemon.conf` starts: `minirag serve-http HOST:PORT`
(MCP over streamable HTTP at /mcp) and `minirag scheduler`, whose rounds run the sync in a
child process at nice 10. The index starts with a small base corpus (written by
`minirag ingest`, so there is no last sync and the scheduler syncs at once); then
`--files` new small Markdown/text files appear, each carrying a unique marker word, and
the scheduler is started. Meanwhile `--clients` MCP clients (fastmcp's Client over the
streamable-HTTP transport of the `mcp` SDK) call query_documents back to back for
`--seconds`.

Figures: calls, failed calls (an exception or an isError result), latency p50/p95/max,
and freshness. A watcher client (not counted in the load) asks for the markers of a
sample of the new files, in the order the sync writes them, and records when each first
comes back; afterwards the chunks table's version history gives the time the batch that
holds each file was committed. Lag = first seen by a query - commit.

    scripts/faults_load.py --clients 20 --seconds 60 --files 3000 --json
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MINIRAG = str(Path(sys.executable).with_name("minirag"))

WORDS = ["calibration", "controller", "network", "vacation", "policy", "invoice", "budget", "release", "schedule",
         "backup", "server", "cluster", "latency", "throughput", "migration", "database", "replica", "storage", "quota",
         "license", "printer", "firmware", "update", "security", "audit", "password", "rotation", "certificate",
         "renewal", "contract", "supplier", "warehouse", "shipment", "delivery", "customer", "support", "ticket",
         "escalation", "meeting", "agenda", "minutes", "decision", "roadmap", "milestone", "deadline", "estimate",
         "risk", "mitigation", "incident", "outage"]
QUERIES = ["How often are backups rotated?", "certificate renewal deadline", "warehouse shipment delays",
           "who approves the budget", "incident escalation policy", "firmware update for printers",
           "database replica latency", "contract with the supplier", "roadmap milestones", "ERR_NET_12",
           "Когда обновляются индексы?", "Wie lange dauert die Lieferung?"]
_LETTERS = "bcdfghjkmpqrstvwxz"


def marker(n: int) -> str:
    """A word no other file contains, that no stemmer shortens: 'zqv' + consonants."""
    out = ""
    while True:
        n, r = divmod(n, len(_LETTERS))
        out = _LETTERS[r] + out
        if n == 0:
            break
    return "zqv" + out.rjust(4, "b")


def write_corpus(docs: Path, count: int, *, prefix: str, seed: int) -> list[tuple[str, str]]:
    """`count` small .md/.txt files under docs/prefix; returns (path, marker) in sync order."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        folder = docs / prefix / f"d{i // 250:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        word = marker(i) if prefix == "new" else ""
        sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + "."
                     for _ in range(rng.randint(2, 5))]
        if i % 3 == 2:
            path = folder / f"note-{i:05d}.txt"
            path.write_text(f"{' '.join(sentences)}\nReference {word}.\n", "utf-8")
        else:
            path = folder / f"doc-{i:05d}.md"
            path.write_text(f"# {rng.choice(WORDS).title()} {i}\n\n{' '.join(sentences)}\n\n"
                            f"Reference {word}.\n", "utf-8")
        out.append((str(path), word))
    out.sort()  # the sync writes files in path order
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def _client(url: str):  # type: ignore[no-untyped-def]
    from fastmcp import Client
    from fastmcp.client.transports import StreamableHttpTransport

    return Client(StreamableHttpTransport(url), timeout=120)


async def load_client(url: str, until: float, tally: Tally, seed: int, markers: list[str]) -> None:
    rng = random.Random(seed)
    try:
        async with await _client(url) as client:
            while time.monotonic() < until:
                query = rng.choice(markers) if markers and rng.random() < 0.2 else rng.choice(QUERIES)
                t0 = time.perf_counter()
                try:
                    result = await client.call_tool("query_documents", {"query": query, "topK": 5},
                                                    raise_on_error=False)
                    if result.is_error:
                        tally.errors.append(f"isError: {json.dumps(result.structured_content)[:300]}")
                    elif "results" not in (result.structured_content or {}):
                        tally.errors.append("no results field in the answer")
                except Exception as exc:  # noqa: BLE001 - every failure counts, whatever its kind
                    tally.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                tally.latencies.append(time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - a lost session is counted, not raised
        tally.errors.append(f"session: {type(exc).__name__}: {exc}"[:300])


async def watcher(url: str, sample: list[str], seen: dict[str, tuple[float, float]], asked: dict[str, float],
                  load_until: float, until: float, tally: Tally, enough: int, batch: int = 12) -> None:
    """Ask for the next unseen markers (in write order) until `enough` are seen or time is up.

    `asked` keeps when each marker was last asked for: a marker never asked for (the watcher
    stopped at `enough` first) says nothing about freshness. Back to back during the load;
    after it, four times a second, leaving the CPU to the sync."""
    async with await _client(url) as client:
        pending = list(sample)
        while pending and len(seen) < enough and time.monotonic() < until:
            ask = pending[:batch]
            sent, t0 = time.time(), time.perf_counter()
            asked.update(dict.fromkeys(ask, sent))
            try:
                result = await client.call_tool("query_documents", {"query": " ".join(ask), "topK": 100},
                                                raise_on_error=False)
            except Exception as exc:  # noqa: BLE001 - every failure counts, whatever its kind
                tally.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                await asyncio.sleep(0.2)
                continue
            tally.latencies.append(time.perf_counter() - t0)
            now = time.time()
            if result.is_error:
                tally.errors.append(f"isError: {json.dumps(result.structured_content)[:300]}")
                await asyncio.sleep(0.2)
                continue
            texts = " ".join(h.get("text", "") for h in (result.structured_content or {}).get("results", []))
            for m in ask:
                if m in texts:
                    seen.setdefault(m, (sent, now))
            pending = [m for m in pending if m not in seen]
            await asyncio.sleep(0.05 if time.monotonic() < load_until else 0.25)


def commit_times(db_path: Path, wanted: dict[str, str]) -> dict[str, float]:
    """For each source id in `wanted` (source -> marker): the wall time of the first chunks-table
    version that contains it."""
    import lancedb

    table = lancedb.connect(str(db_path)).open_table("chunks")
    out: dict[str, float] = {}
    for version in sorted(table.list_versions(), key=lambda v: v["version"]):
        if len(out) == len(wanted):
            break
        table.checkout(version["version"])
        ts = version["timestamp"].timestamp()
        rows = table.search().select(["source_id"]).limit(None).to_list()
        for sid in {r["source_id"] for r in rows}:
            if sid in wanted and wanted[sid] not in out:
                out[wanted[sid]] = ts
    return out


def wait_port(port: int, proc: subprocess.Popen[Any], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve-http exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"serve-http did not listen on {port} within {timeout} s")


def stop(proc: subprocess.Popen[Any] | None, timeout: float = 30) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


async def _run_clients(url: str, clients: int, seconds: float, sample: list[str], base_markers: list[str],
                       on_start: Any, drain_s: float, enough: int
                       ) -> tuple[Tally, Tally, dict[str, tuple[float, float]], dict[str, float], float, float]:
    tally, watch_tally, seen, asked = Tally(), Tally(), {}, {}
    # Handshake and a first (cold) query before the clock starts: the model loads once.
    async with await _client(url) as warm:
        await warm.list_tools()
        await warm.call_tool("query_documents", {"query": "warm up"}, raise_on_error=False)
    started = time.monotonic()
    until = started + seconds
    wall_start = time.time()
    started_sync = on_start()
    if asyncio.iscoroutine(started_sync):
        await started_sync
    watch = asyncio.create_task(watcher(url, sample, seen, asked, until, until + drain_s, watch_tally, enough))
    await asyncio.gather(*(load_client(url, until, tally, seed, base_markers) for seed in range(clients)))
    elapsed = time.monotonic() - started
    await watch
    return tally, watch_tally, seen, asked, elapsed, wall_start


async def _sync_start(url: str) -> None:
    async with await _client(url) as client:
        result = await client.call_tool("sync_start", {}, raise_on_error=False)
        if result.is_error:
            raise RuntimeError(f"sync_start failed: {result.structured_content}")


def run(clients: int, seconds: float, files: int, *, base_files: int = 40, sample_every: int | None = None,
        drain_s: float = 1800.0, enough: int | None = None, index_base: Callable[[Path], Any] | None = None,
        sync_via: str = "scheduler", workdir: Path | None = None, log=sys.stderr) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Set up, run the load, tear down; returns the figures.

    `sync_via="mcp"` starts the sync with the sync_start tool instead (a thread in the server
    process, as when a client asks for one) rather than the scheduler's separate process.

    The watcher stops once `enough` sampled files were seen (default: all of them) or `drain_s`
    after the load. `index_base(folder)` indexes the base corpus into <workdir>/index instead of
    a `minirag ingest` process (the tests pass their already loaded model)."""
    tmp = tempfile.TemporaryDirectory(prefix="minirag-load-") if workdir is None else None
    work = Path(tmp.name) if tmp else workdir
    assert work is not None
    docs, db = work / "docs", work / "index"
    env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME")}
    env |= {"BASE_DIR": str(docs), "DB_PATH": str(db), "SYNC_INTERVAL": "86400", "PYTHONUNBUFFERED": "1"}
    server = scheduler = None
    try:
        base = write_corpus(docs, base_files, prefix="base", seed=1)
        t0 = time.monotonic()
        if index_base is not None:
            index_base(docs / "base")
        else:
            subprocess.run([MINIRAG, "ingest", str(docs / "base"), "--json"], env=env, check=True,
                           capture_output=True, timeout=600)
        print(f"base corpus of {len(base)} files ingested in {time.monotonic() - t0:.1f} s", file=log)
        new = write_corpus(docs, files, prefix="new", seed=2)
        step = sample_every or max(11, files // 300)  # at most ~12 per 128-file batch: one probe sees a commit
        sample = [m for _p, m in new[::step]]
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        with open(work / "serve-http.log", "wb") as server_log:  # the server writes through its own copy
            server = subprocess.Popen([MINIRAG, "serve-http", f"127.0.0.1:{port}"], env=env, stdout=server_log,
                                      stderr=subprocess.STDOUT, cwd=work)
        wait_port(port, server)
        holder: dict[str, Any] = {}

        def start_sync() -> Any:
            holder["t"] = time.time()
            if sync_via == "mcp":
                return _sync_start(url)
            with open(work / "scheduler.log", "wb") as scheduler_log:
                holder["p"] = subprocess.Popen([MINIRAG, "scheduler"], env=env, stdout=scheduler_log,
                                               stderr=subprocess.STDOUT, cwd=work)
            return None

        tally, watch_tally, seen, asked, elapsed, wall_start = asyncio.run(
            _run_clients(url, clients, seconds, sample, [], start_sync, drain_s, enough or len(sample)))
        scheduler = holder.get("p")
        # The full run waits (within the drain window) for the sync's own report; a run that
        # stops at `enough` does not.
        sync_done = _wait_last_sync(db, holder.get("t", 0.0), wall_start + elapsed + drain_s if enough is None else 0)
        stop(scheduler)
        server_alive = server.poll() is None
        stop(server)
        by_source = {p: m for p, m in new if m in set(sample)}
        commits = commit_times(db, by_source)
        # The first query that saw a file was sent `lag` after its batch committed (the query
        # before it, sent earlier, did not see it): an upper bound on how stale a reader can be.
        lags = [seen[m][0] - commits[m] for m in sample if m in seen and m in commits]
        answered = [seen[m][1] - commits[m] for m in sample if m in seen and m in commits]
        # Stale: asked for more than 3 s after its batch committed, and still not found. A marker
        # never asked for (the watcher had seen `enough` first) or committed just before the
        # watcher's last question is no evidence either way.
        never = [m for m in sample if m in commits and m not in seen and commits[m] < asked.get(m, 0.0) - 3]
        seen_uncommitted = [m for m in sample if m in seen and m not in commits]
        lat = tally.latencies
        figures = {
            "clients": clients, "seconds": round(elapsed, 1), "files": files, "syncVia": sync_via,
            "calls": len(lat), "failedCalls": len(tally.errors), "callsPerSecond": round(len(lat) / elapsed, 1),
            "latencyMs": {"p50": _ms(pct(lat, 0.5)), "p95": _ms(pct(lat, 0.95)), "max": _ms(max(lat, default=None))},
            "errors": sorted(set(tally.errors))[:10],
            "watcher": {"calls": len(watch_tally.latencies), "failedCalls": len(watch_tally.errors),
                        "errors": sorted(set(watch_tally.errors))[:5]},
            "sync": {"startedAt": holder.get("t"), "finishedAt": sync_done.get("finishedAt"),
                     "seconds": sync_done.get("seconds"), "added": sync_done.get("added"),
                     "failedCount": sync_done.get("failedCount"),
                     "committedDuringLoad": sum(1 for m in sample if commits.get(m, 1e18) <= wall_start + elapsed),
                     "firstCommitAfterS": _s(min(commits.values()) - holder["t"]) if commits else None,
                     "lastCommitAfterS": _s(max(commits.values()) - holder["t"]) if commits else None,
                     "sampled": len(sample)},
            "freshness": {"sampledFiles": len(sample), "committed": len(commits), "asked": len(asked),
                          "seen": len(seen),
                          "committedNeverSeen": len(never), "seenBeforeCommit": len(seen_uncommitted),
                          "seenBeforeSyncFinished": sum(1 for m in seen
                                                        if seen[m][1] < (sync_done.get("finishedAt") or 1e18)),
                          "lagSeconds": {"p50": _s(pct(lags, 0.5)), "p95": _s(pct(lags, 0.95)),
                                         "max": _s(max(lags, default=None)),
                                         "min": _s(min(lags, default=None))},
                          "lagToAnswerSeconds": {"p50": _s(pct(answered, 0.5)), "p95": _s(pct(answered, 0.95)),
                                                 "max": _s(max(answered, default=None))}},
            "serverAlive": server_alive,
        }
        return figures
    finally:
        stop(scheduler)
        stop(server)
        if tmp is not None:
            tmp.cleanup()


def _wait_last_sync(db: Path, started: float, deadline: float) -> dict[str, Any]:
    """The report of the sync that started at `started`, once it is written (at most until `deadline`)."""
    while True:
        with contextlib.suppress(OSError, ValueError):
            done = json.loads((db / "last_sync.json").read_text("utf-8"))
            if done.get("finishedAt", 0) >= started:
                return done
        if time.time() >= deadline:
            return {}
        time.sleep(1)


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


def _s(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--drain", type=float, default=1800, help="seconds the watcher may go on after the load")
    parser.add_argument("--sync", choices=("scheduler", "mcp"), default="scheduler",
                        help="who syncs: the daemon's scheduler process, or the MCP tool sync_start in the server")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = run(args.clients, args.seconds, args.files, drain_s=args.drain, sync_via=args.sync)
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        lat, fr = figures["latencyMs"], figures["freshness"]
        print(f"{figures['clients']} clients, {figures['seconds']} s: {figures['calls']} calls, "
              f"{figures['failedCalls']} failed; latency p50 {lat['p50']} ms, p95 {lat['p95']} ms, max {lat['max']} ms")
        print(f"sync of {args.files} files: {figures['sync']}")
        print(f"freshness over {fr['sampledFiles']} sampled files: {fr}")
    return 0 if figures["failedCalls"] == 0 and figures["watcher"]["failedCalls"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
