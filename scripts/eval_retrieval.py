#!/usr/bin/env python3
"""Retrieval quality through the real pipeline: nDCG@10 and Recall@10 on BEIR-layout sets.

Usage: eval_retrieval.py [--dataset scifact] [--model ID] [--budget N] [--weights 0,0.6,1] [--json]
       eval_retrieval.py --all [--datasets scifact,...] [--out .cache/eval/quality.json] [--json]

Each corpus document becomes a Markdown file (`# title` + text) in a cache
folder, is synced through the appliance exactly as a user's files would be,
and every test query runs through `Appliance.search`. Weight 0.0 is vector
only, 1.0 is keyword order (BM25 only for the top ranks), anything between is
the hybrid. Indexes are cached per dataset/model/budget under .cache/eval.
`--all` runs every dataset for vector only, BM25 only and the default ranking
(the appliance's default RAG_HYBRID_WEIGHT), prints one table and writes it as JSON.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402

DATASETS = {
    "scifact": "scifact",
    "cranfield": "cranfield",
    "xquad-en": "xquad-r/xquad-r-en-passage",
    "xquad-de": "xquad-r/xquad-r-de-passage",
    "xquad-ru": "xquad-r/xquad-r-ru-passage",
    "xquad-multi": "xquad-r/xquad-r-multi-passage",
}
CACHE = ROOT / ".cache" / "eval"


def shared_dir() -> Path:
    path = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
    if not (path / "eval" / "retrieval").is_dir():
        sys.exit(f"error: the evaluation data is missing: {path / 'eval' / 'retrieval'} (set MINIRAG_SHARED)")
    return path


def load(dataset: str, max_queries: int | None) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    base = shared_dir() / "eval" / "retrieval" / DATASETS[dataset]
    corpus = [json.loads(line) for line in (base / "corpus.jsonl").open(encoding="utf-8")]
    qrels: dict[str, dict[str, int]] = {}
    with (base / "qrels" / "test.tsv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    queries = {}
    for line in (base / "queries.jsonl").open(encoding="utf-8"):
        q = json.loads(line)
        if q["_id"] in qrels:
            queries[q["_id"]] = q["text"]
    if max_queries:
        queries = dict(list(queries.items())[:max_queries])
    return corpus, queries, qrels


def materialise(corpus: list[dict], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    # The folder lies under the project's git-ignored .cache/, and discovery honours the enclosing
    # repository's .gitignore, so it would see no files; an empty .git makes the folder a repository
    # top of its own, outside the project's ignore rules.
    (folder / ".git").mkdir(exist_ok=True)
    marker = folder / ".complete"
    if marker.exists():
        return
    for doc in corpus:
        title = (doc.get("title") or "").strip()
        body = f"# {title}\n\n{doc['text']}\n" if title else f"{doc['text']}\n"
        (folder / f"{doc['_id']}.md").write_text(body, encoding="utf-8")
    marker.write_text("ok")


def open_app(dataset: str, corpus: list[dict], model: str | None = None,
             budget: int | None = None) -> tuple[Appliance, dict]:
    """The dataset's cached index, synced (built on first use); and its description."""
    docs = CACHE / "docs" / dataset
    materialise(corpus, docs)
    env = dict(os.environ)
    if model:
        env["MODEL_NAME"] = model
    if budget:
        env["CHUNK_TOKEN_BUDGET"] = str(budget)
    settings = load_settings(env, base_dirs=[str(docs)])
    app = Appliance(settings)
    tag = f"{dataset}-{app.spec.id.replace('/', '__')}-{app.budget}"
    app = Appliance(replace(settings, db_path=CACHE / "index" / tag))
    started = time.perf_counter()
    report = app.sync()
    info = {"dataset": dataset, "model": app.spec.id, "budget": app.budget, "docs": len(corpus),
            "chunks": app.index.count_chunks(), "syncSeconds": round(time.perf_counter() - started, 1),
            "indexedThisRun": report.added + report.updated, "tag": tag}
    return app, info


def ndcg_recall(ranked: list[str], relevant: dict[str, int], k: int = 10) -> tuple[float, float]:
    dcg = sum((2 ** relevant.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum((2 ** r - 1) / math.log2(i + 2) for i, r in enumerate(ideal))
    recall = len(set(ranked[:k]) & set(relevant)) / len(relevant)
    return (dcg / idcg if idcg else 0.0), recall


def evaluate(app: Appliance, queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    ndcgs, recalls, times = [], [], []
    for qid, text in queries.items():
        started = time.perf_counter()
        result = app.search(text, top_k=40)
        times.append(time.perf_counter() - started)
        ranked: list[str] = []
        for hit in result.results:
            doc = Path(hit["source"]).stem
            if doc not in ranked:
                ranked.append(doc)
        n, r = ndcg_recall(ranked, qrels[qid])
        ndcgs.append(n)
        recalls.append(r)
    times.sort()
    return {"nDCG@10": round(sum(ndcgs) / len(ndcgs), 4), "Recall@10": round(sum(recalls) / len(recalls), 4),
            "queries": len(ndcgs), "p50_ms": round(1000 * times[len(times) // 2], 1)}


def run_dataset(dataset: str, weights: list[float | None], model: str | None = None, budget: int | None = None,
                max_queries: int | None = None) -> dict:
    """Every weight on one dataset; None is the appliance's default ranking."""
    corpus, queries, qrels = load(dataset, max_queries)
    app, out = open_app(dataset, corpus, model, budget)
    out["runs"] = {}
    for weight in weights:
        settings = app.settings if weight is None else replace(app.settings, hybrid_weight=weight)
        name = f"default (w={settings.hybrid_weight})" if weight is None else f"weight={weight}"
        out["runs"][name] = evaluate(Appliance(settings, embedder=app.embedder), queries, qrels)
    return out


def label(name: str) -> str:
    return {"weight=1.0": "BM25 only", "weight=0.0": "vector only"}.get(name, name if name.startswith("default")
                                                                            else f"hybrid {name}")


def run_all(out_path: Path, as_json: bool, datasets: list[str]) -> None:
    table = {"generated": time.strftime("%Y-%m-%d %H:%M"), "datasets": {}}
    for dataset in datasets:
        table["datasets"][dataset] = run_dataset(dataset, [0.0, 1.0, None])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    if as_json:
        print(json.dumps(table, indent=2))
        return
    print(f"{'dataset':12} {'ranking':22} {'nDCG@10':>8} {'Recall@10':>10} {'queries':>8} {'p50 ms':>7}")
    for dataset, out in table["datasets"].items():
        for name, f in out["runs"].items():
            print(f"{dataset:12} {label(name):22} {f['nDCG@10']:8.4f} {f['Recall@10']:10.4f} "
                  f"{f['queries']:8} {f['p50_ms']:7}")
    print(f"written to {out_path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", choices=sorted(DATASETS))
    parser.add_argument("--all", action="store_true", help="every dataset: vector only, BM25 only, default")
    parser.add_argument("--datasets", default=",".join(DATASETS), help="with --all: which datasets")
    parser.add_argument("--out", type=Path, default=CACHE / "quality.json", help="where --all writes its JSON")
    parser.add_argument("--model", default=None, help="MODEL_NAME (default: the appliance default)")
    parser.add_argument("--budget", type=int, default=None, help="CHUNK_TOKEN_BUDGET")
    parser.add_argument("--weights", default="1.0,0.0,0.6", help="comma-separated RAG_HYBRID_WEIGHT values")
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.all:
        run_all(args.out, args.json, args.datasets.split(","))
        return
    out = run_dataset(args.dataset, [float(w) for w in args.weights.split(",")], args.model, args.budget,
                      args.max_queries)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['dataset']}: {out['docs']} docs, {out['chunks']} chunks, model {out['model']}, "
          f"budget {out['budget']}, sync {out['syncSeconds']} s ({out['indexedThisRun']} indexed this run)")
    for name, figures in out["runs"].items():
        print(f"  {label(name):22} nDCG@10 {figures['nDCG@10']:.4f}  Recall@10 {figures['Recall@10']:.4f}  "
              f"({figures['queries']} queries, p50 {figures['p50_ms']} ms)")


if __name__ == "__main__":
    main()
