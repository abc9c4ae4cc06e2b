#!/usr/bin/env python3
"""Warm query latency through the service layer on the SciFact index, and the process RSS.

Usage: bench_query.py [--queries 1000] [--model ID] [--dataset scifact] [--scoped] [--json]

`--scoped` asks every query with the documents' folder as scope (a filter that holds
every chunk: the same answer, through the filtered path). `--dataset` names another
of eval_retrieval.py's datasets (its index and its questions).

Needs the index that `scripts/eval_retrieval.py --dataset scifact` (or the dataset named)
builds (it is cached under .cache/eval); builds it first when missing.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402
from scripts.eval_retrieval import DATASETS  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--model", default=None)
    parser.add_argument("--dataset", default="scifact", choices=sorted(DATASETS))
    parser.add_argument("--scoped", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    docs = (ROOT / ".cache" / "eval" / "docs" / args.dataset).resolve()  # the source ids name the real path
    env = dict(os.environ) | ({"MODEL_NAME": args.model} if args.model else {})
    app = Appliance(load_settings(env, base_dirs=[str(docs)]))
    index = ROOT / ".cache" / "eval" / "index" / f"{args.dataset}-{app.spec.id.replace('/', '__')}-{app.budget}"
    if not index.exists():
        cmd = [sys.executable, str(ROOT / "scripts" / "eval_retrieval.py"), "--dataset", args.dataset,
               "--weights", "0.6"]
        subprocess.run(cmd + (["--model", args.model] if args.model else []), check=True, env=env)
    app = Appliance(replace(app.settings, db_path=index))
    shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
    questions = shared / "eval/retrieval" / DATASETS[args.dataset] / "queries.jsonl"
    texts = [json.loads(line)["text"] for line in questions.open()]
    rss_start = rss_mb()
    app.search(texts[0])  # load the model and open the tables
    times = []
    for i in range(args.queries):
        started = time.perf_counter()
        app.search(texts[i % len(texts)], top_k=10, scope=str(docs) if args.scoped else None)
        times.append(time.perf_counter() - started)
    times.sort()
    out = {"model": app.spec.id, "dataset": args.dataset, "chunks": app.index.registry.count_chunks(),
           "queries": len(times),
           "p50_ms": round(1000 * times[len(times) // 2], 2), "p95_ms": round(1000 * times[int(len(times) * 0.95)], 2),
           "max_ms": round(1000 * times[-1], 2), "rss_before_mb": round(rss_start, 1), "rss_after_mb": round(rss_mb(), 1),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['queries']} warm queries over {out['chunks']} chunks ({out['model']}): "
              f"p50 {out['p50_ms']} ms, p95 {out['p95_ms']} ms, max {out['max_ms']} ms; "
              f"RSS {out['rss_after_mb']} MB (peak {out['peak_rss_mb']} MB)")


if __name__ == "__main__":
    main()
