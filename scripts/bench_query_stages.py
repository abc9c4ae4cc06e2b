#!/usr/bin/env python3
"""Where a hybrid query's time goes: the wall time of each read a query makes, over an index that
`scripts/bench_scale.py --work DIR --keep` built and kept.

Usage: bench_query_stages.py DIR/index-SIZE [--queries 100] [--one-at-a-time] [--scoped | --whole]
                            [--prefiltered] [--json]

The queries are the ones bench_scale.py served over that index (its queries.json). Each read of the
index's `IndexReader` (the two BM25 sides, the vector side, the passages read for telling copies apart,
the sections, the vectors read for ties) and the query's embedding are timed where they are called, so
the figures are those of a real `Appliance.search`; what the reads leave of a query's time is fusion
and assembly in Python. `--one-at-a-time` runs the BM25 sides in the calling thread instead of beside
the vector side, so each read's time is its own rather than shared with the others on a busy machine.
`--scoped` scopes each query to the first of the index's folders, as bench_scale.py's scoped queries are;
`--whole` scopes each to the whole folder indexed (every row); `--prefiltered` (with either) has LanceDB
prefilter the scoped sides instead of the reader using its address book (reads._postfiltered, and a scope
of every row searched as none).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale

from appliance.search import hybrid

READS = ("keyword_side", "vector_side", "similarities", "passage_bodies", "passage_languages", "section_chunks")


class _InCaller:
    """An executor that runs each task at once in the calling thread."""

    def submit(self, call: Callable[..., Any], *args: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(call(*args))
        return done


def _timed(times: dict[str, list[float]], name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            times[name].append(1000 * (time.perf_counter() - started))
    return timed


def measure(index_dir: Path, queries: int, one_at_a_time: bool, scoped: bool = False,
            prefiltered: bool = False, whole: bool = False) -> dict[str, Any]:
    texts = json.loads((index_dir / "queries.json").read_text(encoding="utf-8"))["texts"][:queries]
    app = bench_scale.serving_app(index_dir / "index", index_dir / "docs")
    scope = str(index_dir / "docs") if whole else bench_scale.scoped_folder(index_dir / "docs") if scoped else None
    if prefiltered:  # before any scoped search could have a book read
        app.index.reader.address_book = lambda _: None
    for text in texts[:5]:  # load the model, open the tables and their indexes
        app.search(text, scope=scope)
    if scope is not None and not prefiltered:
        bench_scale.book_read(app)
    if one_at_a_time:
        hybrid._KEYWORD_POOL = _InCaller()  # type: ignore[assignment]
    times: dict[str, list[float]] = defaultdict(list)
    reader = app.index.reader
    for name in READS:
        setattr(reader, name, _timed(times, name, getattr(reader, name)))
    embedder = app.resources.embedder
    embedder.embed_query = _timed(times, "embed_query", embedder.embed_query)  # type: ignore[method-assign]
    total = []
    before = bench_scale.cpu_ms()
    for text in texts:
        started = time.perf_counter()
        app.search(text, top_k=10, scope=scope)
        total.append(1000 * (time.perf_counter() - started))
    cpu = round((bench_scale.cpu_ms() - before) / len(texts), 1)

    def pct(values: list[float], q: float) -> float:
        return round(float(np.percentile(values, q)), 1)

    return {"queries": len(texts), "one_at_a_time": one_at_a_time, "scoped": scoped, "whole": whole,
            "prefiltered": prefiltered,
            "hybrid_p50_ms": pct(total, 50), "hybrid_p95_ms": pct(total, 95), "cpu_ms_per_query": cpu,
            "reads": {name: {"calls_per_query": round(len(v) / len(texts), 2), "p50_ms": pct(v, 50),
                             "p95_ms": pct(v, 95), "ms_per_query": round(sum(v) / len(texts), 1)}
                      for name, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index_dir", type=Path, help="an index folder bench_scale.py --keep left (DIR/index-SIZE)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--one-at-a-time", action="store_true", help="the BM25 sides in the calling thread")
    parser.add_argument("--scoped", action="store_true",
                        help="each query scoped to the first of the index's folders, as bench_scale.py's scoped ones")
    parser.add_argument("--whole", action="store_true",
                        help="each query scoped to the whole folder indexed (a scope holding every row)")
    parser.add_argument("--prefiltered", action="store_true",
                        help="with --scoped or --whole: LanceDB prefilters the vector side (no address book)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = measure(args.index_dir, args.queries, args.one_at_a_time, args.scoped, args.prefiltered, args.whole)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    kind = ("prefiltered " if out["prefiltered"] else "") + (
        "queries scoped to every row" if out["whole"] else "scoped queries" if out["scoped"] else "queries")
    print(f"{out['queries']} {kind}, hybrid p50 / p95 {out['hybrid_p50_ms']} / {out['hybrid_p95_ms']} ms, "
          f"CPU {out['cpu_ms_per_query']} ms a query")
    for name, read in out["reads"].items():
        print(f"  {name:18s} {read['calls_per_query']:4.1f} a query, p50 {read['p50_ms']:6.1f} ms, "
              f"p95 {read['p95_ms']:6.1f} ms, {read['ms_per_query']:6.1f} ms a query")


if __name__ == "__main__":
    main()
