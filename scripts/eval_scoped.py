#!/usr/bin/env python3
"""Scoped retrieval quality: each query searched inside the folder of its first relevant document, with the
sides scaled by the scope's own candidates (the appliance's rule) and by the whole index's.

Usage: eval_scoped.py [--dataset scifact] [--folders 10] [--through-lancedb] [--json]

The dataset's documents become Markdown files in `--folders` folders (a document's folder from a hash of its
id, so each folder's documents are spread like any other's), synced through the appliance into a cached index
(.cache/eval). Every query runs unscoped, then scoped to one folder; it is judged by nDCG@10 and Recall@10
against its relevant documents inside that folder. The whole index's scale is the rule before the scope's own,
kept here as an experiment: each filtered side is searched again without the filter and handed to fusion with
that search's scale (search.fusion, docs/DESIGN.md "Filters choose the candidates").

`--through-lancedb` gives the index no memory for the replica, so a set of more than 5,000 chunks gets LanceDB's
vector index as a large one does, and adds the scoped queries with their vector side prefiltered by LanceDB
instead of masked by the reader's address book (reads._postfiltered).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import eval_retrieval as ev  # noqa: E402

from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402
from appliance.storage.sides import Side  # noqa: E402


def folder_of(doc_id: str, folders: int) -> str:
    return f"f{int(hashlib.sha256(doc_id.encode()).hexdigest(), 16) % folders}"


def whole_index_scale(side: Callable[..., Side]) -> Callable[..., Side]:
    """A reader's side (vector_side, keyword_side) whose filtered rows come with the unfiltered search's scale."""
    def scaled(query: Any, limit: int, where: Any, columns: list[str], *args: Any) -> Side:
        inside = side(query, limit, where, columns, *args)
        if where is None:
            return inside
        whole = side(query, limit, None, columns, *args)
        return Side(inside.rows, whole.best, whole.floor)
    return scaled


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
    parser.add_argument("--through-lancedb", action="store_true",
                        help="no replica: LanceDB's vector index, and the scoped queries prefiltered too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    corpus, queries, qrels = ev.load(args.dataset, None)
    name = f"{args.dataset}-folders" + ("" if args.folders == 10 else str(args.folders))
    docs = ev.CACHE / "docs" / name
    ev.materialise(corpus, docs, lambda doc_id: folder_of(doc_id, args.folders))
    settings = load_settings(dict(os.environ), base_dirs=[str(docs)])
    if args.through_lancedb:
        settings, name = replace(settings, replica_budget_bytes=0), f"{name}-lancedb"
    app = Appliance(replace(settings, db_path=ev.CACHE / "index" / name))
    app.sync()
    reader = app.index.reader
    chunks = app.index.tables.chunks()
    while args.through_lancedb and chunks is not None and reader.address_book(chunks) is None:
        time.sleep(0.05)  # as a server has it a moment after its first scoped query
    out: dict[str, Any] = {"dataset": args.dataset, "queries": len(queries), "folders": args.folders,
                           "unscoped": ev.evaluate(app, queries, qrels),
                           "scoped_own_scale": scoped(app, docs, queries, qrels, args.folders)}
    if args.through_lancedb:
        reader.address_book = lambda _: None  # type: ignore[method-assign]
        out["scoped_prefiltered"] = scoped(app, docs, queries, qrels, args.folders)
        del reader.address_book
    try:
        reader.vector_side = whole_index_scale(reader.vector_side)  # type: ignore[method-assign]
        reader.keyword_side = whole_index_scale(reader.keyword_side)  # type: ignore[method-assign]
        out["scoped_whole_index_scale"] = scoped(app, docs, queries, qrels, args.folders)
    finally:
        del reader.vector_side, reader.keyword_side  # the class's methods again
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{args.dataset}, {out['queries']} queries, {args.folders} folders (nDCG@10 / Recall@10):")
    for key in ("unscoped", "scoped_own_scale", "scoped_prefiltered", "scoped_whole_index_scale"):
        if key not in out:
            continue
        print(f"  {key:26} {out[key]['nDCG@10']:.4f} / {out[key]['Recall@10']:.4f}")


if __name__ == "__main__":
    main()
