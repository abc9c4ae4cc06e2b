#!/usr/bin/env python3
"""Warm query latency of two source trees, interleaved: the same SciFact questions asked by each in turn.

Usage: bench_query_ab.py --before DIR [--after DIR] [--queries 600] [--index DIR/index-SIZE] [--json]

Each tree (a checkout of the project, e.g. `git worktree add /tmp/before HEAD~3`, with `.cache` and
`models/baked` linked to this one's) answers in a process of its own over the same cached index
(`scripts/bench_query.py` builds it); every question is asked by both, with the dictionaries and
without, the first tree alternating, so a machine shared with other work slows both alike and
their ratio holds where the absolute figures do not. Prints wall p50 / p95, the process's
CPU time per query (all its threads: LanceDB's, onnxruntime's, BLAS's), and how many questions the
two trees answered with other hits or another order (a change that only optimises must show none).

With `--index`, over an index `scripts/bench_scale.py --work DIR --keep` built and kept instead (its
queries.json), each question asked unscoped and scoped to the folder bench_scale.py scopes to.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("on", "off")
SCALE_MODES = ("whole", "scoped")


def serve(root: Path, built: Path | None) -> None:
    """The worker: load `root`'s appliance over the SciFact index (or the bench_scale index `built`), then
    answer "index mode" lines with "wall cpu" seconds of that query and a digest of its hits in order."""
    sys.path.insert(0, str(root))
    from appliance.search import dictionaries

    scope: str | None = None
    if built is None:
        from scripts.bench_query import _dataset

        app, _docs, texts = _dataset("scifact", None)
    else:
        from scripts import bench_scale

        app = bench_scale.serving_app(built / "index", built / "docs")
        texts = json.loads((built / "queries.json").read_text(encoding="utf-8"))["texts"]
        scope = bench_scale.scoped_folder(built / "docs")
        app.search(texts[0], scope=scope)
    app.search(texts[0])  # load the model and open the tables
    loaded = dictionaries.active()
    print("ready", flush=True)
    for line in sys.stdin:
        index, mode = line.split()
        if built is None:
            dictionaries._ACTIVE = dictionaries.State(loaded if mode == "on" else None, None)
        wall, cpu = time.perf_counter(), time.process_time()
        answer = app.search(texts[int(index) % len(texts)], top_k=10, scope=scope if mode == "scoped" else None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        hits = hashlib.sha256(repr([(h.source, h.chunk_index) for h in answer.results]).encode()).hexdigest()
        print(wall, cpu, hits[:16], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--index", type=Path, default=None, help="a bench_scale.py index (DIR/index-SIZE)")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.index)
        return
    modes = SCALE_MODES if args.index else MODES
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    built = ["--index", str(args.index.resolve())] if args.index else []
    workers = {name: subprocess.Popen([sys.executable, __file__, "--before", str(root), "--serve", str(root), *built],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                      env=dict(os.environ, PYTHONPATH=str(root)))
               for name, root in trees.items()}
    for worker in workers.values():
        if worker.stdout is None or worker.stdout.readline().strip() != "ready":
            sys.exit("a worker did not start")
    found: dict[str, list[tuple[float, float]]] = {f"{name}/{mode}": [] for name in trees for mode in modes}
    differ = dict.fromkeys(modes, 0)
    for i in range(args.queries):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        for mode in modes:
            digests = set()
            for name in order:
                worker = workers[name]
                assert worker.stdin is not None and worker.stdout is not None
                worker.stdin.write(f"{i} {mode}\n")
                worker.stdin.flush()
                wall, cpu, digest = worker.stdout.readline().split()
                found[f"{name}/{mode}"].append((float(wall), float(cpu)))
                digests.add(digest)
            differ[mode] += len(digests) > 1
    for worker in workers.values():
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()
    out = {"queries": args.queries, "trees": {k: str(v) for k, v in trees.items()},
           "figures": {key: _figures(times) for key, times in found.items()}, "answers_differ": differ}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for key, f in out["figures"].items():
        print(f"{key:11} wall p50 {f['p50_ms']:6.1f} p95 {f['p95_ms']:6.1f} ms | CPU p50 {f['cpu_p50_ms']:6.1f} "
              f"mean {f['cpu_mean_ms']:6.1f} ms")
    for mode in modes:
        before, after = out["figures"][f"before/{mode}"], out["figures"][f"after/{mode}"]
        label = f"translation {mode}" if mode in MODES else mode
        print(f"{label}: after/before p50 x{after['p50_ms'] / before['p50_ms']:.2f}, "
              f"p95 x{after['p95_ms'] / before['p95_ms']:.2f}, "
              f"CPU x{after['cpu_mean_ms'] / before['cpu_mean_ms']:.2f}; "
              f"{differ[mode]} of {args.queries} answers differ (hits or their order)")


def _figures(times: list[tuple[float, float]]) -> dict[str, float]:
    """bench_query's wall figures, and the CPU time's p50 and mean."""
    from bench_query import _figures as wall_figures

    cpus = [c for _, c in times]
    return {**wall_figures([w for w, _ in times]), "cpu_p50_ms": round(1000 * sorted(cpus)[len(cpus) // 2], 1),
            "cpu_mean_ms": round(1000 * sum(cpus) / len(cpus), 1)}


if __name__ == "__main__":
    main()
