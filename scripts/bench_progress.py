#!/usr/bin/env python
"""Usage: scripts/bench_progress.py [--docs DIR | --from DIR --sample N --max-kb K] [--every S] [--json]

How truthful a first sync's progress is: `minirag sync` runs over a folder into a fresh
index while this script reads the progress record every process sees (DB_PATH/sync_progress.json,
what `status`, `sync_status` and the page show) every --every seconds. When the sync is done,
each reading's etaSeconds is set against the time the sync really still took:

* ETA error: |etaSeconds - actual seconds left|, median / p90 over the readings of the
  indexing phase, and the same relative to the actual time left;
* optimistic share: readings whose ETA was under half the actual time left;
* frozen: the longest stretch in which the record said every file was done (or did not
  change at all) while the sync went on;
* no ETA: the share of indexing readings without one.

Without --docs it copies --sample text files (.md, .txt, .html up to --max-kb KB, sorted by
path) from --from (default /usr/share/doc) into a throwaway folder.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MINIRAG = str(Path(sys.executable).with_name("minirag"))
KINDS = {".md", ".txt", ".html"}


def sample(source: Path, count: int, max_kb: int, into: Path) -> int:
    files = sorted(p for p in source.rglob("*") if p.is_file() and not p.is_symlink()
                   and p.suffix.lower() in KINDS and p.stat().st_size <= max_kb * 1024)
    step = max(1, len(files) // count)  # spread over the folder, not the first package's files only
    for i, p in enumerate(files[::step][:count]):
        target = into / f"{i:04d}-{p.parent.name}-{p.name}"
        shutil.copy2(p, target)
    (into / ".git").mkdir()  # a repository top of its own: no enclosing .gitignore applies
    return min(count, len(files[::step]))


def watch(env: dict[str, str], db: Path, every: float) -> tuple[list[dict[str, Any]], float, dict[str, Any]]:
    """Run the sync; (readings with their time, the sync's end time, its report)."""
    started = time.time()
    proc = subprocess.Popen([MINIRAG, "sync", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    readings = []
    while proc.poll() is None:
        try:
            record = json.loads((db / "sync_progress.json").read_text("utf-8"))
        except (OSError, ValueError):
            record = None
        if record:
            readings.append({"t": time.time() - started} | record)
        time.sleep(every)
    out, _ = proc.communicate()
    if proc.returncode not in (0, 1):
        sys.exit(f"error: the sync failed ({proc.returncode})")
    return readings, time.time() - started, json.loads(out)


def figures(readings: list[dict[str, Any]], end: float) -> dict[str, Any]:
    indexing = [r for r in readings if r.get("phase") == "indexing"]
    with_eta = [r for r in indexing if r.get("etaSeconds") is not None]
    errors = sorted(abs(r["etaSeconds"] - (end - r["t"])) for r in with_eta)
    relative = sorted(abs(r["etaSeconds"] - (end - r["t"])) / max(end - r["t"], 1.0) for r in with_eta)
    optimistic = sum(1 for r in with_eta if r["etaSeconds"] < (end - r["t"]) / 2)
    frozen = longest = 0.0
    last_key, since = None, 0.0
    for r in indexing:
        key = (r.get("filesDone"), r.get("chunksWritten"), r.get("etaSeconds"))
        if key != last_key:
            last_key, since = key, r["t"]
        longest = max(longest, r["t"] - since)
    all_done = [r["t"] for r in indexing if r.get("filesTotal") and r.get("filesDone") == r.get("filesTotal")]
    if all_done:
        frozen = end - all_done[0]

    def pct(values: list[float], q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 2) if values else float("nan")

    return {"readings": len(indexing), "withEta": len(with_eta),
            "noEtaShare": round(1 - len(with_eta) / len(indexing), 3) if indexing else None,
            "etaErrorSeconds": {"median": round(statistics.median(errors), 1) if errors else None,
                                "p90": pct(errors, 0.9)},
            "etaErrorRelative": {"median": round(statistics.median(relative), 3) if relative else None,
                                 "p90": pct(relative, 0.9)},
            "optimisticShare": round(optimistic / len(with_eta), 3) if with_eta else None,
            "secondsAllFilesShownDoneBeforeTheEnd": round(frozen, 1),
            "longestUnchangedSeconds": round(longest, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, help="sync this folder as it is")
    parser.add_argument("--from", dest="source", type=Path, default=Path("/usr/share/doc"))
    parser.add_argument("--sample", type=int, default=150)
    parser.add_argument("--max-kb", type=int, default=64)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between readings")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="minirag-progress-") as tmp:
        docs = args.docs
        if docs is None:
            docs = Path(tmp) / "docs"
            docs.mkdir()
            sample(args.source, args.sample, args.max_kb, docs)
        db = Path(tmp) / "index"
        env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS",)} | {"BASE_DIR": str(docs),
                                                                                  "DB_PATH": str(db)}
        readings, end, report = watch(env, db, args.every)
    out = {"docs": str(args.docs or args.source), "files": report.get("added"), "chunks": report.get("chunks"),
           "syncSeconds": round(end, 1), "load": round(os.getloadavg()[0], 1)} | figures(readings, end)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['files']} files, {out['chunks']} chunks, first sync {out['syncSeconds']} s (load {out['load']})")
    print(f"  ETA error: median {out['etaErrorSeconds']['median']} s, p90 {out['etaErrorSeconds']['p90']} s; "
          f"relative median {out['etaErrorRelative']['median']}, p90 {out['etaErrorRelative']['p90']}")
    print(f"  optimistic (ETA < half the time left): {out['optimisticShare']}; no ETA: {out['noEtaShare']} "
          f"of {out['readings']} readings")
    print(f"  every file shown done {out['secondsAllFilesShownDoneBeforeTheEnd']} s before the end; "
          f"longest unchanged record {out['longestUnchangedSeconds']} s")


if __name__ == "__main__":
    main()
