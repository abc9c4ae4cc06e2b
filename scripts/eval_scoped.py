#!/usr/bin/env python3
"""Scoped retrieval quality: each query searched inside the folder of its first relevant document, with the
sides scaled by the whole index's candidates (the appliance's rule) and by the scope's own.

Usage: eval_scoped.py [--dataset scifact] [--folders 10] [--json]

The dataset's documents become Markdown files in `--folders` folders (a document's folder from a hash of its
id, so each folder's documents are spread like any other's), synced through the appliance into a cached index
(.cache/eval). Every query runs unscoped, then scoped to one folder; it is judged by nDCG@10 and Recall@10
against its relevant documents inside that folder. The scope's own scale is an experiment, not a setting:
fusion is handed each side's rows with the best and the worst of those rows as its scale (Side.whole), which
is what a ranker that scaled a filtered side by its own candidates would give. A scope's own scale would spare
a scoped query the unfiltered searches that give the whole index's (docs/BENCHMARKS.md, Growth).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import eval_retrieval as ev  # noqa: E402

from appliance.config import load_settings  # noqa: E402
from appliance.search import hybrid  # noqa: E402
from appliance.service import Appliance  # noqa: E402
from appliance.storage.sides import Side  # noqa: E402


def folder_of(doc_id: str, folders: int) -> str:
    return f"f{int(hashlib.sha256(doc_id.encode()).hexdigest(), 16) % folders}"


def own_scale(fuse: Any) -> Any:
    """`fuse` handed each side scaled by its own rows, not by the whole index's candidates."""
    def fused(vector: Side, keyword: Side, weight: float, *args: Any, **kwargs: Any) -> Any:
        return fuse(Side.whole(vector.rows, "_distance"), Side.whole(keyword.rows, "_score"), weight, *args, **kwargs)
    return fused


def scoped(app: Appliance, docs: Path, queries: dict[str, str], qrels: dict[str, dict[str, int]],
           folders: int) -> dict[str, float]:
    ndcgs, recalls = [], []
    for qid, text in queries.items():
        where = folder_of(sorted(qrels[qid])[0], folders)
        inside = {d: grade for d, grade in qrels[qid].items() if folder_of(d, folders) == where}
        ranked: list[str] = []
        for hit in app.search(text, top_k=40, scope=str(docs / where)).results:
            if (doc := Path(hit.source).stem) not in ranked:
                ranked.append(doc)
        ndcg, recall = ev.ndcg_recall(ranked, inside)
        ndcgs.append(ndcg)
        recalls.append(recall)
    return {"nDCG@10": round(sum(ndcgs) / len(ndcgs), 4), "Recall@10": round(sum(recalls) / len(recalls), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", choices=sorted(ev.DATASETS))
    parser.add_argument("--folders", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    corpus, queries, qrels = ev.load(args.dataset, None)
    name = f"{args.dataset}-folders" + ("" if args.folders == 10 else str(args.folders))
    docs = ev.CACHE / "docs" / name
    ev.materialise(corpus, docs, lambda doc_id: folder_of(doc_id, args.folders))
    settings = load_settings(dict(os.environ), base_dirs=[str(docs)])
    app = Appliance(replace(settings, db_path=ev.CACHE / "index" / name))
    app.sync()
    fuse = hybrid.fuse
    out: dict[str, Any] = {"dataset": args.dataset, "queries": len(queries), "folders": args.folders,
                           "unscoped": ev.evaluate(app, queries, qrels),
                           "scoped_whole_index_scale": scoped(app, docs, queries, qrels, args.folders)}
    try:
        hybrid.fuse = own_scale(fuse)  # type: ignore[assignment]
        out["scoped_own_scale"] = scoped(app, docs, queries, qrels, args.folders)
    finally:
        hybrid.fuse = fuse  # type: ignore[assignment]
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{args.dataset}, {out['queries']} queries, {args.folders} folders (nDCG@10 / Recall@10):")
    for key in ("unscoped", "scoped_whole_index_scale", "scoped_own_scale"):
        print(f"  {key:26} {out[key]['nDCG@10']:.4f} / {out[key]['Recall@10']:.4f}")


if __name__ == "__main__":
    main()
