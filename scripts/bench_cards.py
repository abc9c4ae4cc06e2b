#!/usr/bin/env python3
"""Reads through each chunk's card against reads of its columns, in one process over one index.

Usage: bench_cards.py DIR/index-SIZE [--queries 100] [--rounds 3] [--json]

DIR/index-SIZE is what `scripts/bench_scale.py --work DIR --keep` built and kept (an index past the replica's
memory budget, so LanceDB ranks). Each round asks every query unscoped and scoped to the first folder, once
reading through the cards and once with them hidden from the reader (`Tables.chunk_fields` without `card`,
what a table without cards reads); the order alternates between rounds. Prints p50 / p95 / mean of each and
how many answers were the same both ways.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale

from appliance.storage.tables import CARD


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index_dir", type=Path, help="an index folder bench_scale.py --keep left (DIR/index-SIZE)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root: Path = args.index_dir
    texts: list[str] = json.loads((root / "queries.json").read_text(encoding="utf-8"))["texts"][:args.queries]
    app = bench_scale.serving_app(root / "index", root / "docs")
    tables = app.index.reader.tables
    tables.chunks()
    if not tables.cards_stored:
        sys.exit(f"{root / 'index'} holds no cards: open it once with a process that may write")
    fields = tables.chunk_fields
    scope = bench_scale.scoped_folder(root / "docs")
    for text in texts[:5]:  # load the model, open the tables and their indexes
        app.search(text)
        app.search(text, scope=scope)
    ways, kinds = ("columns", "card"), ("hybrid", "scoped")
    times: dict[str, list[float]] = {f"{way} {kind}": [] for way in ways for kind in kinds}
    answers: dict[tuple[str, str, str], str] = {}
    for round_ in range(args.rounds):
        for way in ways if round_ % 2 == 0 else ways[::-1]:
            tables.chunk_fields = fields if way == "card" else fields - {CARD}
            for text in texts:
                for kind, where in (("hybrid", None), ("scoped", scope)):
                    started = time.perf_counter()
                    answer = app.search(text, scope=where)
                    times[f"{way} {kind}"].append(1000 * (time.perf_counter() - started))
                    answers.setdefault((way, kind, text), answer.model_dump_json())
    tables.chunk_fields = fields
    same = sum(answers[("card", kind, text)] == answers[("columns", kind, text)] for kind in kinds for text in texts)

    def figures(values: list[float]) -> dict[str, float]:
        return {"p50_ms": round(statistics.median(values), 1), "p95_ms": round(float(np.percentile(values, 95)), 1),
                "mean_ms": round(statistics.mean(values), 1)}

    out: dict[str, Any] = {name: figures(values) for name, values in times.items()}
    out |= {"queries": len(texts), "rounds": args.rounds, "same_answers": same, "answers": 2 * len(texts)}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for name in times:
        print(f"{name:16} p50 {out[name]['p50_ms']:7.1f} ms   p95 {out[name]['p95_ms']:7.1f} ms   "
              f"mean {out[name]['mean_ms']:7.1f} ms")
    print(f"the same answers both ways: {same} of {2 * len(texts)}")


if __name__ == "__main__":
    main()
