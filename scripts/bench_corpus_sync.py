#!/usr/bin/env python3
"""A full sync of ../shared/corpus: files/s, chunks/s, embedding-busy share, peak RSS.

Usage: bench_corpus_sync.py [--corpus DIR] [--with-scans] [--workers N] [--skip-raw] [--json]

Without --with-scans the corpus's scans (its `ocr/` folder and image files) are
left out, so the figures describe conversion overlapping embedding; with it,
OCR is included. Measured inside one process around `Appliance.sync()`:

* embedding-busy share: seconds spent inside `OnnxEmbedder.embed_passages` during
  the sync divided by the sync's wall time (conversion in the worker process
  should overlap embedding, so this approaches 1);
* ratio to the raw rate: the sync's chunks/s against `embed_passages` on the
  same chunk texts afterwards, in the same process;
* peak RSS during the sync: this process, and this process plus its conversion
  workers (sampled every 0.2 s); also the largest worker's own peak;
* where the model sat idle: before its first batch, after its last, and the
  longest gaps in between (with when they began), to show what it waited for.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402
from scripts.bench_convert import _rss_kb, _status, _tree  # noqa: E402

SCAN_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"}


def copy_corpus(src: Path, dest: Path, with_scans: bool) -> int:
    """The corpus into `dest` (so the sync's roots hold nothing else); returns the file count."""
    count = 0
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if not path.is_file() or path.name == "EXPECTED.tsv":
            continue
        if not with_scans and (rel.parts[0] == "ocr" or path.suffix.lower() in SCAN_SUFFIXES):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        count += 1
    return count


class RssSampler:
    """Peak RSS during the sync, of this process and of this process plus its conversion workers, and the largest
    worker's own peak (VmHWM: getrusage's would start at this process's peak, bench_convert._status)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_self_mb = self.peak_tree_mb = self.peak_worker_mb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            self.peak_self_mb = max(self.peak_self_mb, _rss_kb(me) // 1024)
            tree = _tree(me)
            self.peak_tree_mb = max(self.peak_tree_mb, sum(_rss_kb(p) for p in tree) // 1024)
            self.peak_worker_mb = max([self.peak_worker_mb, *(_status(p, "VmHWM") // 1024 for p in tree if p != me)])
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
    parser.add_argument("--corpus", type=Path, default=shared / "corpus")
    parser.add_argument("--with-scans", action="store_true", help="include the scans (OCR)")
    parser.add_argument("--workers", type=int, default=1, help="conversion worker processes (CONVERT_WORKERS)")
    parser.add_argument("--skip-raw", action="store_true", help="do not re-embed the texts for the raw rate")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.corpus.is_dir():
        raise SystemExit(f"no corpus at {args.corpus} (set MINIRAG_SHARED or pass --corpus)")
    work = Path(tempfile.mkdtemp(prefix="minirag-bench-corpus-"))
    try:
        docs = work / "docs"
        files = copy_corpus(args.corpus, docs, args.with_scans)
        app = Appliance(load_settings({"CONVERT_WORKERS": str(args.workers)}, base_dirs=[str(docs)],
                                      db_path=str(work / "index")))
        app.resources.embedder.load()
        calls: list[tuple[float, float]] = []
        embed = app.resources.embedder.embed_passages

        def timed(texts):  # type: ignore[no-untyped-def]
            began = time.perf_counter()
            try:
                return embed(texts)
            finally:
                calls.append((began, time.perf_counter()))

        app.resources.embedder.embed_passages = timed  # type: ignore[method-assign]
        build = [0.0]
        refresh = app.index.writes.refresh_indexes

        def timed_refresh(**kwargs):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            try:
                return refresh(**kwargs)
            finally:
                build[0] += time.perf_counter() - started

        app.index.writes.refresh_indexes = timed_refresh  # type: ignore[method-assign]
        sampler = RssSampler()
        started = time.perf_counter()
        with sampler:
            report = app.sync()
        wall = time.perf_counter() - started
        app.resources.embedder.embed_passages = embed  # type: ignore[method-assign]

        busy = sum(end - began for began, end in calls)
        raw_rate = None
        if not args.skip_raw:
            texts = [r["text"] for r in app.index.reader.chunk_rows("chunk_index >= 0", ["text"])]
            began = time.perf_counter()
            embed(texts)
            raw_rate = len(texts) / (time.perf_counter() - began)
        out = {
            "files": files, "withScans": args.with_scans, "indexed": report.added, "failed": len(report.failed),
            "skipped": len(report.skipped), "chunks": report.chunks, "syncSeconds": round(wall, 1),
            "filesPerSecond": round(files / wall, 2), "chunksPerSecond": round(report.chunks / wall, 1),
            "rawEmbedChunksPerSecond": round(raw_rate, 1) if raw_rate else None,
            "shareOfRawRate": round(report.chunks / wall / raw_rate, 2) if raw_rate else None,
            "embeddingBusyShare": round(busy / wall, 3),
            "indexBuildSeconds": round(build[0], 1),
            "embeddingBusyShareBeforeIndexBuild": round(busy / (wall - build[0]), 3),
            "modelIdle": idle_report(calls, started, started + wall),
            "peakRssMb": sampler.peak_self_mb, "peakTreeRssMb": sampler.peak_tree_mb,
            "peakWorkerRssMb": sampler.peak_worker_mb,
            "cpus": os.cpu_count(), "loadAverage": round(os.getloadavg()[0], 1),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['files']} files ({'with' if args.with_scans else 'without'} scans): {out['indexed']} indexed, "
          f"{out['failed']} failed, {out['skipped']} skipped, {out['chunks']} chunks in {out['syncSeconds']} s")
    rate = f"{out['filesPerSecond']} files/s, {out['chunksPerSecond']} chunks/s"
    if out["shareOfRawRate"] is not None:
        rate += (f" = {out['shareOfRawRate']:.0%} of the raw embedding rate "
                 f"({out['rawEmbedChunksPerSecond']} chunks/s on the same texts)")
    print("  " + rate)
    print(f"  embedding busy {out['embeddingBusyShare']:.1%} of the sync's wall time, "
          f"{out['embeddingBusyShareBeforeIndexBuild']:.1%} before the final index build "
          f"({out['indexBuildSeconds']} s: BM25, B-trees, HNSW)")
    print(f"  peak RSS: sync process {out['peakRssMb']} MB, with its workers {out['peakTreeRssMb']} MB, "
          f"largest conversion worker {out['peakWorkerRssMb']} MB")
    idle = out["modelIdle"]
    gaps = ", ".join(f"{g['seconds']} s at {g['at']} s" for g in idle["longestGaps"])
    print(f"  model idle: {idle['beforeFirst']} s before its first batch, {idle['afterLast']} s after its last, "
          f"{idle['between']} s between batches (longest: {gaps or 'none'})")


def idle_report(calls: list[tuple[float, float]], start: float, end: float, longest: int = 5) -> dict:
    """Seconds the model sat idle within [start, end], from its calls' (began, ended) times."""
    if not calls:
        return {"beforeFirst": round(end - start, 1), "afterLast": 0.0, "between": 0.0, "longestGaps": []}
    calls = sorted(calls)
    gaps = [(b - a_end, a_end) for (_a, a_end), (b, _e) in itertools.pairwise(calls) if b > a_end]
    top = sorted(gaps, reverse=True)[:longest]
    return {"beforeFirst": round(calls[0][0] - start, 1), "afterLast": round(end - calls[-1][1], 1),
            "between": round(sum(g for g, _ in gaps), 1),
            "longestGaps": [{"seconds": round(g, 1), "at": round(at - start, 1)} for g, at in top]}


if __name__ == "__main__":
    main()
