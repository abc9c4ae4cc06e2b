#!/usr/bin/env python3
"""What replacing indexed sources costs the write path: `IndexWriter.replace_sources` on a table of
N chunks, for one source at a time (an ingest, a re-index of one changed file), for a
sync's write batch of many small sources, and for one source that lost chunks (the
costlier swap of appliance/storage/swap.py).

Usage: bench_replace.py [--sources 2000] [--chunks-per-source 10] [--batch 50] [--rounds 5] [--json]

No model: the vectors are random unit vectors of the baked model's size (384), so the figures
are LanceDB's alone. To compare two versions of the store, run it with PYTHONPATH set to each
tree. Each figure is the median of --rounds writes; the index's indexes are built first
(refresh_indexes), as a sync leaves them.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH, so another tree given there wins

from appliance.config import replica_budget  # noqa: E402
from appliance.storage.index import Index  # noqa: E402
from appliance.storage.tables import SourceRow  # noqa: E402

DIM = 384


def _rows(source: SourceRow, chunks: int, rng: np.random.Generator, stamp: float) -> list[dict[str, Any]]:
    vectors = rng.standard_normal((chunks, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    key = source.source_id.replace("/", "_")
    return [{"id": f"{key}:{i}", "source_id": source.source_id, "source_kind": "data", "path": source.source_id,
             "chunk_index": i, "text": f"chunk {i} of {source.source_id} " * 40, "body_start": 0,
             "keywords": f"chunk {source.source_id}", "title": "", "parent_id": f"{key}:s0",
             "ingested_at": stamp, "scheme": "bench", "model_id": "bench", "vector": vectors[i],
             "embed_key": f"{key}:{i}:{stamp}", "also_unchanged_on": []} for i in range(chunks)]


def _write(index: Index, ids: list[str], chunks: int, rng: np.random.Generator) -> float:
    stamp = time.time()
    sources = [SourceRow(source_id=sid, source_kind="data", path=sid, chunk_count=chunks, ingested_at=stamp)
               for sid in ids]
    rows = [r for s in sources for r in _rows(s, chunks, rng, stamp)]
    start = time.perf_counter()
    index.writes.replace_sources(sources, rows)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", type=int, default=2000)
    ap.add_argument("--chunks-per-source", type=int, default=10)
    ap.add_argument("--batch", type=int, default=50, help="sources per write in the batch figure")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    ids = [f"doc-{n:06d}" for n in range(args.sources)]
    with tempfile.TemporaryDirectory(prefix="bench-replace-") as tmp:
        index = Index(Path(tmp) / "db", DIM, memory_budget=replica_budget())
        start = time.perf_counter()
        for first in range(0, len(ids), 500):
            _write(index, ids[first:first + 500], args.chunks_per_source, rng)
        index.writes.refresh_indexes(fold_now=True)
        build_s = time.perf_counter() - start
        one = [_write(index, [ids[(n * 37) % len(ids)]], args.chunks_per_source, rng) for n in range(args.rounds)]
        batch = [_write(index, ids[n * args.batch:(n + 1) * args.batch], args.chunks_per_source, rng)
                 for n in range(args.rounds)]
        shrink = [_write(index, [ids[(n * 53 + 11) % len(ids)]], max(1, args.chunks_per_source - 2), rng)
                  for n in range(args.rounds)]
        total = index.registry.count_chunks()
    import appliance.storage.tables as store_module

    result = {
        "store": str(Path(store_module.__file__).resolve()),
        "chunks": total,
        "sources": args.sources,
        "build_seconds": round(build_s, 2),
        "replace_one_source_ms": round(statistics.median(one) * 1000, 1),
        "replace_batch_ms": round(statistics.median(batch) * 1000, 1),
        "replace_shrunk_source_ms": round(statistics.median(shrink) * 1000, 1),
        "batch_sources": args.batch,
        "rounds": args.rounds,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:24} {value}")


if __name__ == "__main__":
    main()
