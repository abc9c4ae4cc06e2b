#!/usr/bin/env python3
"""Warm query latency through the service layer on the SciFact index, and the process RSS.

Usage: bench_query.py [--queries 1000] [--model ID] [--dataset scifact] [--scoped] [--translation on|off|both]
                      [--manuals] [--json]

`--scoped` asks every query with the documents' folder as scope (a filter that holds
every chunk: the same answer, through the filtered path). `--translation both` asks each
query with the baked dictionaries and without them in turn (off: no translated keyword list,
no compound split of the query), so a loaded machine slows both alike; the figures come per mode.
`--manuals` runs on the manuals index of scripts/eval_manuals.py (5,834 chunks, questions in three
languages) instead of SciFact's; `--dataset` names another of eval_retrieval.py's datasets (its
index and its questions).

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
from appliance.search import dictionaries  # noqa: E402
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
    parser.add_argument("--translation", choices=["on", "off", "both"], default="on")
    parser.add_argument("--manuals", action="store_true", help="the manuals index and questions, not SciFact's")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    app, docs, texts = _manuals() if args.manuals else _dataset(args.dataset, args.model)
    rss_start = rss_mb()
    app.search(texts[0])  # load the model and open the tables
    loaded = dictionaries.active()
    modes = ["on", "off"] if args.translation == "both" else [args.translation]
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for i in range(args.queries):
        for mode in modes:
            dictionaries._ACTIVE = dictionaries.State(loaded if mode == "on" else None, None)
            started = time.perf_counter()
            app.search(texts[i % len(texts)], top_k=10, scope=str(docs) if args.scoped else None)
            times[mode].append(time.perf_counter() - started)
    out = {"model": app.spec.id, "dataset": "manuals" if args.manuals else args.dataset,
           "chunks": app.index.registry.count_chunks(), "queries": args.queries,
           "translation": {mode: _figures(found) for mode, found in times.items()},
           "rss_before_mb": round(rss_start, 1), "rss_after_mb": round(rss_mb(), 1),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for mode, f in out["translation"].items():
        print(f"{out['queries']} warm queries over {out['chunks']} chunks ({out['model']}), translation {mode}: "
              f"p50 {f['p50_ms']} ms, p95 {f['p95_ms']} ms, max {f['max_ms']} ms")
    print(f"RSS {out['rss_after_mb']} MB (peak {out['peak_rss_mb']} MB)")


def _figures(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {"p50_ms": round(1000 * times[len(times) // 2], 2), "p95_ms": round(1000 * times[int(len(times) * 0.95)], 2),
            "max_ms": round(1000 * times[-1], 2)}


def _dataset(name: str, model: str | None) -> tuple[Appliance, Path, list[str]]:
    docs = (ROOT / ".cache" / "eval" / "docs" / name).resolve()  # the source ids name the real path
    env = dict(os.environ) | ({"MODEL_NAME": model} if model else {})
    app = Appliance(load_settings(env, base_dirs=[str(docs)]))
    index = ROOT / ".cache" / "eval" / "index" / f"{name}-{app.spec.id.replace('/', '__')}-{app.resources.budget}"
    if not index.exists():
        cmd = [sys.executable, str(ROOT / "scripts" / "eval_retrieval.py"), "--dataset", name, "--weights", "0.6"]
        subprocess.run(cmd + (["--model", model] if model else []), check=True, env=env)
    app = Appliance(replace(app.settings, db_path=index))
    shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
    questions = shared / "eval/retrieval" / DATASETS[name] / "queries.jsonl"
    return app, docs, [json.loads(line)["text"] for line in questions.open()]


def _manuals() -> tuple[Appliance, Path, list[str]]:
    sys.path.insert(0, str(ROOT / "scripts"))
    from eval_manuals import open_manuals
    from manuals_set import load_questions

    app, _info = open_manuals(sync=False)
    return app, app.settings.roots[0], [q["question"] for q in load_questions()]


if __name__ == "__main__":
    main()
