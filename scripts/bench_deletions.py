#!/usr/bin/env python3
"""What deleted rows cost every query, and what settling them costs a sync's end, over an index that
`scripts/bench_scale.py --work DIR --keep` built and kept.

Usage: bench_deletions.py DIR/index-SIZE [--sources 1] [--queries 100] [--json]

While any fragment of the chunks table holds a deleted row, LanceDB masks every row its vector and BM25
searches scan (storage.writes.SETTLED_DELETIONS). This deletes the rows of `--sources` files, one in each of
as many fragments, as replacing or removing those files does, then serves bench_scale.py's queries through
`Appliance.search` against three versions of the table: as built, with the deletions, and with them settled
as a sync's end settles them (`writes.fold(settle=True)`, in a process of its own, for its time and peak
memory). A server reading the latest version answers queries before and after, for its RSS (a fold that
replaced the indexes it read renews its LanceDB session: storage.tables.Tables.renew_session). Each version is
then served by an Appliance of its own held at it; they take turns query by query, so
the machine's drift weighs on each alike. The table is then restored as it was built (LanceDB's restore,
which commits no new data), whatever happens on the way.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale

from appliance.platform import native_memory
from appliance.storage import writes

RSS_QUERIES = 50
"""Queries a server answers before its RSS is read, on the table as built and again once the deletions are settled."""
RSS_SETTLE_S = 12.0
"""How long the server idles before its RSS is read again (jemalloc returns freed pages within ~10 s)."""


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1)


def _delete_spread(chunks: Any, sources: int) -> list[str]:
    """Delete the rows of `sources` files, each from another fragment (the first file found in it)."""
    fragments = chunks.to_lance().get_fragments()
    picked = []
    for fragment in fragments[::max(1, len(fragments) // sources)][:sources]:
        picked.append(fragment.to_table(columns=["source_id"], limit=1).column("source_id")[0].as_py())
    chunks.delete("source_id IN (" + ", ".join("'" + s.replace("'", "''") + "'" for s in picked) + ")")
    return picked


def _settle(index_path: Path) -> dict[str, float]:
    """writes.fold(settle=True) on the chunks table in a child process: its seconds and peak RSS."""
    code = ("import sys, time, lancedb; from appliance.storage import writes; "
            f"t = lancedb.connect({str(index_path)!r}).open_table('chunks'); s = time.perf_counter(); "
            "writes.fold(t, settle=True); print(round(time.perf_counter() - s, 2))")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                          cwd=bench_scale.ROOT, env=native_memory.with_jemalloc(os.environ))  # as a sync has it
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"settle_s": float(done.stdout.split()[-1]), "settle_peak_rss_mb": round(max(peak, before) / 1024, 1)}


def _pinned(index_dir: Path, version: int, embedder: Any) -> Any:
    """An Appliance that serves `version` of the chunks table whatever is committed after it."""
    app = bench_scale.serving_app(index_dir / "index", index_dir / "docs", embedder)
    app.index.tables.refresh_handles = lambda: None  # no checkout of the latest version before a query
    chunks = app.index.tables.chunks()
    assert chunks is not None
    chunks.checkout(version)
    return app


def measure(index_dir: Path, sources: int, queries: int) -> dict[str, Any]:
    texts = json.loads((index_dir / "queries.json").read_text(encoding="utf-8"))["texts"][:queries]
    chunks = lancedb.connect(str(index_dir / "index")).open_table("chunks")  # this script's own handle
    if writes.has_deletions(chunks):
        raise SystemExit(f"{index_dir}: the chunks table holds deleted rows already; rebuild it with bench_scale.py")
    built = chunks.version
    times: dict[str, list[float]] = {"built": [], "deleted": [], "settled": []}
    cpu: dict[str, float] = dict.fromkeys(times, 0.0)
    app = bench_scale.serving_app(index_dir / "index", index_dir / "docs")  # serves the latest, as a server does
    try:
        for text in texts[:RSS_QUERIES]:
            app.search(text)
        rss = {"serving_rss_mb_before": round(bench_scale.rss_mb(), 1)}
        deleted_files = _delete_spread(chunks, sources)
        deleted = chunks.version
        settled = _settle(index_dir / "index")
        chunks.checkout_latest()
        assert not writes.has_deletions(chunks)
        for text in texts[:RSS_QUERIES]:
            app.search(text)
        time.sleep(RSS_SETTLE_S)  # what the allocator keeps of freed pages goes back meanwhile
        app.search(texts[0])
        rss["serving_rss_mb_after"] = round(bench_scale.rss_mb(), 1)
        embedder = app.resources.embedder
        apps = {"built": _pinned(index_dir, built, embedder), "deleted": _pinned(index_dir, deleted, embedder),
                "settled": _pinned(index_dir, chunks.version, embedder)}
        for served in apps.values():  # load the model, open each version's indexes
            for text in texts[:5]:
                served.search(text)
        states = list(apps)
        for n, text in enumerate(texts):
            for state in states[n % len(states):] + states[:n % len(states)]:
                before, started = bench_scale.cpu_ms(), time.perf_counter()
                apps[state].search(text, top_k=10)
                times[state].append(1000 * (time.perf_counter() - started))
                cpu[state] += bench_scale.cpu_ms() - before
    finally:
        chunks.restore(built)
    return {"queries": len(texts), "sources_deleted": len(deleted_files), **settled, **rss,
            **{f"{state}_{name}": value for state, values in times.items()
               for name, value in (("p50_ms", _pct(values, 50)), ("p95_ms", _pct(values, 95)),
                                   ("cpu_ms", round(cpu[state] / len(values), 1)))}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index_dir", type=Path, help="an index folder bench_scale.py --keep left (DIR/index-SIZE)")
    parser.add_argument("--sources", type=int, default=1, help="files whose rows are deleted, one a fragment")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = measure(args.index_dir, args.sources, args.queries)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['sources_deleted']} file(s) deleted; settling them: {out['settle_s']} s, "
          f"peak RSS {out['settle_peak_rss_mb']} MB; a server's RSS {out['serving_rss_mb_before']} MB before, "
          f"{out['serving_rss_mb_after']} MB after")
    for state in ("built", "deleted", "settled"):
        print(f"  {state:8s} p50 {out[state + '_p50_ms']:6.1f} ms  p95 {out[state + '_p95_ms']:6.1f} ms  "
              f"CPU {out[state + '_cpu_ms']:6.1f} ms a query")


if __name__ == "__main__":
    main()
