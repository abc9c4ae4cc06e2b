#!/usr/bin/env python3
"""`minirag sync` over the hostile file set: every file handled by name, memory and time bounded.

Usage: faults_hostile.py [--big] [--json] [--timeout S] [--keep DIR]

Generates `scripts/hostile_files.py`'s set in a temporary folder and runs one
`minirag sync --json` over it with the real model, as a child process, while a
sampler adds up the RSS of the child's whole process tree (the sync, its
conversion workers and their tesseract runs) every 50 ms. Afterwards `minirag list
--json` gives each file's state. Prints files tried / handled (a named error, a
skip entry or an index entry, as the generator expects), each file's outcome, the
peak RSS (the sampled sum over the tree, and each process's own peak, VmHWM), and the slowest
conversion. Peaks come from VmHWM, not getrusage: a child's ru_maxrss starts at its parent's peak
(bench_convert._status), and under pytest the parent is a worker that ran other tests.

Per-file times: the child is `minirag sync` with `ConvertPool._run` wrapped by a
timer (from the moment a ready worker takes the file until its answer or the
kill); files refused by name or size never reach a worker and take no time.

`--big` adds the 200 MB single-line files (MAX_FILE_SIZE is set to 200,000,000:
one file is exactly at it, one a byte over).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_convert import _rss_kb, _status, _tree  # noqa: E402
from scripts.hostile_files import Case, generate, max_file_size  # noqa: E402

DEFAULT_TIMEOUT_S = 30
MEMORY_MB = 1024
SYNC_RSS_TARGET_MB = 1536
"""The sync process's own documented ceiling (README: peak RSS of a sync <= 1.5 GB)."""
RSS_BOUND_MB = SYNC_RSS_TARGET_MB + round(MEMORY_MB * 1.048576)
"""The peak RSS of the whole sync process tree that the fault suite asserts: the sync's own ceiling
plus one worker at its address-space limit (CONVERT_MEMORY_MB MiB), 2,610 MB. It was 2,048 MB until
PDF text came from pdfium: the 10,000-page PDF that pdfminer timed out on is now read whole, so the
worker reaches its limit (1,049 MB) and the sync chunks and embeds ~4,200 hostile chunks (1,139 MB);
the sampled tree peak stayed at 1,827 MB."""
"""CONVERT_MEMORY_MB for the run. A worker's RSS stays under its address-space limit, so the
tree's peak is at most the sync's own peak plus this: with the default 3072 a single worker
reached 2.6 GB on zip/huge_dimension.xlsx before its MemoryError."""
KILL_SLACK_S = 10
"""Past CONVERT_TIMEOUT: the pool's 1 s polling, SIGKILL of the worker's group and the error's way back."""
MINIRAG = str(Path(sys.executable).with_name("minirag"))

CHILD = r"""
import json, os, sys, time
from appliance.ingest import isolate
from appliance.ingest.isolate import STARTUP_TIMEOUT_S

times = {}
original = isolate.ConvertPool._run

def timed(self, worker, task, path):
    worker.wait_ready(STARTUP_TIMEOUT_S)  # a respawn's imports are not the file's time
    start = time.monotonic()
    try:
        return original(self, worker, task, path)
    finally:
        times[os.fsencode(path).decode("utf-8", "backslashreplace")] = time.monotonic() - start

isolate.ConvertPool._run = timed
from appliance.adapters.cli import app
try:
    app(["sync", "--json"], prog_name="minirag")
finally:
    with open("/proc/self/status") as fh:  # the peak since this process's exec (bench_convert._status)
        usage = {"self_kb": next((int(line.split()[1]) for line in fh if line.startswith("VmHWM:")), 0)}
    with open(os.environ["HOSTILE_TIMES"], "w") as fh:
        json.dump({"times": times, "usage": usage}, fh)
"""


@dataclass
class Outcome:
    name: str
    attack: str
    expect: str
    outcome: str
    """failed | skipped | indexed | absent | missing (not accounted for)"""
    code: str = ""
    reason: str = ""
    seconds: float = 0.0
    ok: bool = False


@dataclass
class RunResult:
    tried: int
    handled: int
    exit_code: int
    report: dict[str, Any]
    outcomes: list[Outcome]
    peak_tree_rss_mb: float
    """The largest sum over the sync's process tree seen by the sampler (every 20 ms)."""
    peak_process_rss_mb: float
    """The largest single process's own peak (VmHWM): the sync or one of its workers or their tesseract runs."""
    sync_rss_mb: float
    """The sync process's own peak (its VmHWM as it ends)."""
    worker_rss_mb: float
    """The largest worker's own peak plus its largest tesseract run's (TreeSampler.worker_peak_kb)."""
    slowest: str
    slowest_seconds: float
    timeout_s: float
    max_file_size: int
    memory_mb: int
    rss_bound_mb: int = RSS_BOUND_MB
    wall_seconds: float = 0.0
    generate_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def rss_upper_bound_mb(self) -> float:
        """Peaks of the sync and of its largest worker (with its largest tesseract run) added: no sample can miss
        this bound (one worker runs at a time)."""
        return round(self.sync_rss_mb + self.worker_rss_mb, 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"rss_upper_bound_mb": self.rss_upper_bound_mb}


def tree_rss_kb(pid: int) -> int:
    """Sum of VmRSS over `pid` and all its descendants (now)."""
    return sum(_rss_kb(p) for p in _tree(pid))


class TreeSampler(threading.Thread):
    """Samples a process tree until stopped: the peak of its RSS summed, and each process's own peak (VmHWM,
    which a sample cannot miss, but for the last interval of a process killed in it) with its parent."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak_kb = pid, interval, 0
        self.own_peak_kb: dict[int, int] = {}
        self.parent: dict[int, int] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            total = 0
            for p in _tree(self.pid):
                total += _rss_kb(p)
                if hwm := _status(p, "VmHWM"):
                    self.own_peak_kb[p] = max(self.own_peak_kb.get(p, 0), hwm)
                    self.parent[p] = _status(p, "PPid")
            self.peak_kb = max(self.peak_kb, total)
            self._halt.wait(self.interval)

    def worker_peak_kb(self) -> int:
        """The largest child of the root (a conversion worker) at its own peak, plus the largest process
        it started (tesseract runs one page at a time): no two of its processes held more at once."""
        def child_of_root(p: int) -> int | None:
            while p in self.parent and self.parent[p] != self.pid:
                p = self.parent[p]
            return p if self.parent.get(p) == self.pid else None

        started: dict[int, int] = {}
        for p, kb in self.own_peak_kb.items():
            top = child_of_root(p)
            if top is not None and top != p:
                started[top] = max(started.get(top, 0), kb)
        return max((kb + started.get(p, 0) for p, kb in self.own_peak_kb.items()
                    if self.parent.get(p) == self.pid), default=0)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _printable(path: str) -> str:
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def classify(cases: list[Case], docs: Path, report: dict[str, Any], listing: dict[str, Any],
             times: dict[str, float]) -> list[Outcome]:
    """One Outcome per case, from the sync report (failed, skipped) and `list` (indexed)."""
    failed: dict[str, list[dict[str, str]]] = {}
    for item in report.get("failed", []):
        failed.setdefault(item["path"], []).append(item)
    skipped: dict[str, list[dict[str, str]]] = {}
    for item in report.get("skipped", []):
        skipped.setdefault(item["path"], []).append(item)
    states: dict[str, list[dict[str, Any]]] = {}
    for item in listing.get("files", []):
        states.setdefault(item["filePath"], []).append(item)
    out = []
    for case in cases:
        key = _printable(str(docs / case.name))
        hits_f, hits_s = failed.get(key, []), skipped.get(key, [])
        indexed = [s for s in states.get(key, []) if s.get("state") == "indexed"]
        o = Outcome(case.name, case.attack, case.expect, "absent", seconds=round(times.get(key, 0.0), 3))
        entries = len(hits_f) + len(hits_s) + len(indexed)
        if hits_f:
            o.outcome, o.code, o.reason = "failed", hits_f[0]["code"], hits_f[0]["reason"]
        elif hits_s:
            o.outcome, o.code, o.reason = "skipped", hits_s[0]["code"], hits_s[0]["reason"]
        elif indexed:
            o.outcome, o.reason = "indexed", f"{indexed[0].get('chunkCount')} chunks"
        want = {"error": {"failed"}, "skipped": {"skipped"}, "indexed": {"indexed"}, "absent": {"absent"},
                "any": {"failed", "indexed"}}[case.expect]
        o.ok = entries == (0 if case.expect == "absent" else 1) and o.outcome in want
        out.append(o)
    return out


def run(*, big: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = MEMORY_MB,
        workdir: Path | None = None, env_extra: dict[str, str] | None = None) -> RunResult:
    """Generate the set, sync it in a child process, and account for every file."""
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="minirag-hostile-")
        workdir = Path(tmp.name)
    try:
        docs, db = workdir / "docs", workdir / "index" / "db"
        t0 = time.monotonic()
        cases = generate(docs, big=big)
        generated = time.monotonic() - t0
        limit = max_file_size(big)
        env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME")}
        env |= {"BASE_DIR": str(docs), "DB_PATH": str(db), "MAX_FILE_SIZE": str(limit),
                "CONVERT_TIMEOUT": str(int(timeout_s)), "CONVERT_MEMORY_MB": str(memory_mb),
                "HOSTILE_TIMES": str(workdir / "times.json"),
                **(env_extra or {})}
        t1 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, cwd=str(ROOT),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        stdout, stderr = proc.communicate()
        sampler.stop()
        wall = time.monotonic() - t1
        problems = []
        try:
            report = json.loads(stdout)
        except ValueError:
            report = {}
            problems.append(f"sync printed no JSON report (exit {proc.returncode}): {stderr[-2000:]}")
        if proc.returncode not in (0, 1) or "error" in report:
            problems.append(f"sync did not finish normally (exit {proc.returncode}): "
                            f"{report.get('error') or stderr[-2000:]}")
        listed = subprocess.run([MINIRAG, "list", "--json"], env=env, capture_output=True, text=True, timeout=600)
        try:
            listing = json.loads(listed.stdout)
        except ValueError:
            listing = {}
            problems.append(f"list printed no JSON (exit {listed.returncode}): {listed.stderr[-1000:]}")
        try:
            recorded = json.loads((workdir / "times.json").read_text())
        except (OSError, ValueError):
            recorded = {}
            problems.append("the sync child recorded no per-file times")
        times, usage = recorded.get("times", {}), recorded.get("usage", {})
        outcomes = classify(cases, docs, report, listing, times)
        slowest = max(outcomes, key=lambda o: o.seconds)
        return RunResult(
            tried=len(cases), handled=sum(o.ok for o in outcomes), exit_code=proc.returncode,
            report={k: v for k, v in report.items() if k not in ("failed", "skipped")}, outcomes=outcomes,
            peak_tree_rss_mb=round(sampler.peak_kb / 1024, 1),
            peak_process_rss_mb=round(max([usage.get("self_kb", 0), *sampler.own_peak_kb.values()]) / 1024, 1),
            sync_rss_mb=round(usage.get("self_kb", 0) / 1024, 1),
            worker_rss_mb=round(sampler.worker_peak_kb() / 1024, 1),
            slowest=slowest.name, slowest_seconds=slowest.seconds, timeout_s=timeout_s, max_file_size=limit,
            memory_mb=memory_mb,
            wall_seconds=round(wall, 1), generate_seconds=round(generated, 1), problems=problems)
    finally:
        if tmp is not None:
            tmp.cleanup()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--big", action="store_true", help="include the 200 MB single-line files")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="CONVERT_TIMEOUT for the run (s)")
    ap.add_argument("--memory-mb", type=int, default=MEMORY_MB, help="CONVERT_MEMORY_MB for the run")
    ap.add_argument("--keep", type=Path, help="generate into (and keep) this folder instead of a temporary one")
    args = ap.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=False)
    result = run(big=args.big, timeout_s=args.timeout, memory_mb=args.memory_mb, workdir=args.keep)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=1))
    else:
        for o in result.outcomes:
            mark = "ok " if o.ok else "BAD"
            detail = f"{o.code}: {o.reason}" if o.code else o.reason
            print(f"{mark} {o.seconds:7.2f}s {o.outcome:8} (expect {o.expect:7}) {o.name!r}  {detail[:160]}")
        print(f"\nfiles tried {result.tried}, handled {result.handled}; sync exit {result.exit_code} "
              f"in {result.wall_seconds} s (generation {result.generate_seconds} s); "
              f"{result.report.get('added')} indexed, {result.report.get('failedCount')} failed, "
              f"{result.report.get('skippedCount')} skipped")
        print(f"peak RSS: process tree {result.peak_tree_rss_mb} MB (sampled every 20 ms), largest process "
              f"{result.peak_process_rss_mb} MB (its own VmHWM); sync {result.sync_rss_mb} MB + largest worker "
              f"{result.worker_rss_mb} MB = {result.rss_upper_bound_mb} MB at most at once; "
              f"bound {result.rss_bound_mb} MB")
        print(f"slowest file: {result.slowest!r} {result.slowest_seconds} s (CONVERT_TIMEOUT {result.timeout_s:g} s); "
              f"MAX_FILE_SIZE {result.max_file_size}, CONVERT_MEMORY_MB {result.memory_mb}")
        for p in result.problems:
            print("PROBLEM:", p)
    bad = (result.problems or result.handled != result.tried or result.peak_tree_rss_mb > RSS_BOUND_MB
           or result.peak_process_rss_mb > RSS_BOUND_MB or result.rss_upper_bound_mb > RSS_BOUND_MB
           or result.slowest_seconds > result.timeout_s + KILL_SLACK_S)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
