#!/usr/bin/env python3
"""A sync's memory against the number of files it has seen: RSS at each tenth of a first sync of N
short files, and the peak, in a process of its own for each N. The memory is the syncing process's plus
its children's (a long sync indexes in rounds in child processes forked from a fork server:
appliance/sync/rounds.py), each process's proportional set size (PSS: a page shared by k processes
counts 1/k in each, so the fork server's pages count once), sampled every 0.25 s for the peak and for
`peak_rss_mb_per_tenth`, the highest sample within each tenth (a tenth that ends between two rounds
reads low at its end: the round's child has exited);
`own_rss_mb_per_tenth` is the syncing process's RSS alone. In a single process PSS and RSS differ by its
few shared pages.

Usage: [SYNC_ROUND_FILES=0] bench_sync_rss.py [--files 10000,100000] [--json]   (0: no rounds, as before them)

The files and the embedder are bench_scale.py's: real SciFact and Cranfield sentences, and vectors
derived from the text (the model is not what is measured here, and it would take hours at 100,000
files). Then a no-change sync of the same files in a fresh process, with its peak RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

CHILD = """
import json, os, sys, threading, time
sys.path[:0] = [{scripts!r}, {root!r}]
from pathlib import Path
from bench_scale import sync_app
from faults_crash import descendants

def proc_mb(pid, name, field):
    # a /proc/PID/NAME line's kB figure in MB; 0 when the process is gone
    try:
        for line in open(f"/proc/{{pid}}/{{name}}"):
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0

def rss_mb(pid="self"):
    return proc_mb(pid, "status", "VmRSS:")

def pss_mb(pid="self"):
    return proc_mb(pid, "smaps_rollup", "Pss:")

def tree_mb():
    return pss_mb() + sum(pss_mb(p) for p in descendants(os.getpid()))

docs, index = Path(sys.argv[1]), Path(sys.argv[2])
tenths, highs, own, peak, high, done = [], [], [], [0.0], [0.0], threading.Event()

def sample():
    while not done.wait(0.25):
        now = tree_mb()
        peak[0], high[0] = max(peak[0], now), max(high[0], now)

def progress(phase, done_, count, path):
    if phase == "indexing" and count and done_ * 10 >= (len(tenths) + 1) * count:
        now = tree_mb()
        peak[0] = max(peak[0], now)  # a sample here counts for the peak too
        tenths.append(round(now, 1))
        highs.append(round(max(high[0], now), 1))
        high[0] = 0.0
        own.append(round(rss_mb(), 1))

threading.Thread(target=sample, daemon=True).start()
started = time.perf_counter()
report = sync_app(docs, index).sync(progress=progress)
done.set()
print(json.dumps({{"files": report.seen, "added": report.added, "seconds": round(time.perf_counter() - started, 1),
                  "rss_mb_per_tenth": tenths, "peak_rss_mb_per_tenth": highs,
                  "own_rss_mb_per_tenth": own, "rss_mb_end": round(rss_mb(), 1),
                  "peak_rss_mb": round(peak[0], 1),
                  "own_peak_rss_mb": round(proc_mb("self", "status", "VmHWM:"), 1)}}))  # since exec
"""


def run(docs: Path, index: Path) -> dict[str, object]:
    code = CHILD.format(scripts=str(ROOT / "scripts"), root=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code, str(docs), str(index)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"bench_sync_rss: the sync failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    from bench_scale import Corpus, shared_path, write_files

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="10000,100000", help="comma-separated file counts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    corpus = Corpus(shared_path())
    results = []
    for count in (int(n) for n in args.files.split(",")):
        work = Path(tempfile.mkdtemp(prefix="minirag-bench-rss-"))
        try:
            write_files(work / "docs", count, corpus)
            first = run(work / "docs", work / "index")
            again = run(work / "docs", work / "index")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        results.append({"files": count, "first_sync": first, "no_change_sync": again})
        if not args.json:
            print(f"{count:>7,} files: first sync {first['seconds']} s, RSS per tenth {first['rss_mb_per_tenth']} MB, "
                  f"highest in each tenth {first['peak_rss_mb_per_tenth']} MB, "
                  f"peak {first['peak_rss_mb']} MB; no-change sync "
                  f"{again['seconds']} s, peak {again['peak_rss_mb']} MB",
                  flush=True)
    if args.json:
        print(json.dumps({"runs": results, "load_average": round(os.getloadavg()[0], 1)}, indent=2))
    else:
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
