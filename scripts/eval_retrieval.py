#!/usr/bin/env python3
"""Retrieval quality through the real pipeline: nDCG@10 and Recall@10 on BEIR-layout sets.

Usage: eval_retrieval.py [--dataset scifact] [--model ID] [--budget N] [--weights 0,0.6,1] [--lancedb] [--json]
       eval_retrieval.py --all [--datasets scifact,...] [--out .cache/eval/quality.json] [--json]

Each corpus document becomes a Markdown file (`# title` + text) in a cache
folder, is synced through the appliance exactly as a user's files would be,
and every test query runs through `Appliance.search`. Weight 0.0 is vector
only, 1.0 is keyword order (BM25 only for the top ranks), anything between is
the hybrid. Indexes are cached per dataset/model/budget under .cache/eval.
`--all` runs every dataset for vector only, BM25 only and the default ranking
(the appliance's default RAG_HYBRID_WEIGHT), prints one table and writes it as JSON.
`--lancedb` ranks through LanceDB's approximate vector index instead of the in-memory replica, as a
small memory budget ranks a large index (the sync builds that index; a later run without it drops it).

`corpus-xling` is our own set (scripts/eval_data/corpus_crosslingual.jsonl):
questions on real files of ../shared/corpus, each written in another language
than its file. The files are synced as they are (every format the appliance
reads) together with the rest of the corpus as distractors; a question is
judged by file (nDCG@10, Recall@10 on the answering file, copies of it named
in `alsoFiles` counting as the same document) and by passage (a hit of that
file whose text holds the `answer` string: hit@1, hit@10, MRR@10).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.results import RankedHit  # noqa: E402
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
XLING_NAME = "corpus-xling"
XLING = ROOT / "scripts" / "eval_data" / "corpus_crosslingual.jsonl"
"""Our own questions on ../shared/corpus, each in another language than the file that answers it."""
XLING_LEFT_OUT = {"node-textract/LargeLorem.docx": "490,000 characters of lorem ipsum, a tenth of the sync"}
"""Corpus files not synced as distractors although readable, and why."""


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


def materialise(corpus: list[dict], folder: Path, subfolder: Callable[[str], str] | None = None) -> None:
    """Each document as `folder/ID.md`, or `folder/subfolder(ID)/ID.md`; once (a marker says it is complete)."""
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
        home = folder / subfolder(doc["_id"]) if subfolder else folder
        home.mkdir(exist_ok=True)
        (home / f"{doc['_id']}.md").write_text(body, encoding="utf-8")
    marker.write_text("ok")


def open_app(dataset: str, corpus: list[dict], model: str | None = None,
             budget: int | None = None) -> tuple[Appliance, dict]:
    """The dataset's cached index, synced (built on first use); and its description."""
    docs = CACHE / "docs" / dataset
    materialise(corpus, docs)
    return open_index(dataset, docs, len(corpus), model, budget)


def open_index(dataset: str, docs: Path, count: int, model: str | None = None,
               budget: int | None = None, sync: bool = True) -> tuple[Appliance, dict]:
    """The cached index over the folder `docs` (`count` files), synced unless `sync` is False
    (another process may be syncing it); and its description."""
    env = dict(os.environ)
    if model:
        env["MODEL_NAME"] = model
    if budget:
        env["CHUNK_TOKEN_BUDGET"] = str(budget)
    settings = load_settings(env, base_dirs=[str(docs)])
    app = Appliance(settings)
    tag = f"{dataset}-{app.spec.id.replace('/', '__')}-{app.resources.budget}"
    app = Appliance(replace(settings, db_path=CACHE / "index" / tag))
    started = time.perf_counter()
    report = app.sync() if sync else None
    info = {"dataset": dataset, "model": app.spec.id, "budget": app.resources.budget, "docs": count,
            "chunks": app.index.registry.count_chunks(), "syncSeconds": round(time.perf_counter() - started, 1),
            "indexedThisRun": report.added + report.updated if report else 0, "tag": tag}
    return app, info


def load_xling() -> list[dict]:
    """The cross-lingual questions; each is judged by its files (`file` + `alsoFiles`) and its `answer`."""
    return [json.loads(line) for line in XLING.open(encoding="utf-8") if line.strip()]


def needs_ocr(path: Path) -> bool:
    """A PDF without any text layer: syncing it means OCR at ~2.7 s a page, for text no question asks about."""
    from appliance.ingest.ocr import pdf_page_texts

    try:
        return not any(text.strip() for text in pdf_page_texts(path))
    except Exception:  # noqa: BLE001 - damaged or encrypted: the sync records the failure quickly
        return False


def xling_files(corpus: Path, questions: list[dict]) -> list[str]:
    """Every file the set names, and as distractors every other corpus file the appliance reads
    without OCR, so that a question competes with the whole readable corpus (some 630 files). Images
    and PDFs that are scans only are left out: OCR would lengthen the sync by minutes for text no
    question asks about (the OCR folder's hand transcriptions, .gt.txt, are text and stay)."""
    from appliance.ingest.convert import SUPPORTED_EXTENSIONS

    named = {f for q in questions for f in [q["file"], *q.get("alsoFiles", [])]}
    readable = {str(p.relative_to(corpus)) for p in corpus.rglob("*")
                if p.is_file() and p.suffix.lower() in SUPPORTED_EXTENSIONS
                and str(p.relative_to(corpus)) not in XLING_LEFT_OUT
                and not (p.suffix.lower() == ".pdf" and needs_ocr(p))}
    return sorted(readable | named)


def place(corpus: Path, files: list[str], folder: Path) -> None:
    """Copies of `files` under `folder` at their corpus paths, and nothing else (a file dropped from the
    list is removed, so the next sync drops it from the cached index too)."""
    (folder / ".git").mkdir(parents=True, exist_ok=True)  # outside the project's .gitignore, as materialise
    wanted = set(files)
    for path in folder.rglob("*"):
        if path.is_file() and ".git" not in path.relative_to(folder).parts \
                and str(path.relative_to(folder)) not in wanted:
            path.unlink()
    for rel in files:
        target = folder / rel
        if not target.exists() or target.stat().st_size != (corpus / rel).stat().st_size:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(corpus / rel, target)


def open_xling(model: str | None = None, budget: int | None = None) -> tuple[Appliance, dict, list[dict]]:
    """The cross-lingual set's index (its files and the distractors), synced; its description; the questions."""
    questions = load_xling()
    corpus = shared_dir() / "corpus"
    files = xling_files(corpus, questions)
    docs = CACHE / "docs" / XLING_NAME
    place(corpus, files, docs)
    app, info = open_index(XLING_NAME, docs, len(files), model, budget)
    info["answerInNoChunk"] = answer_in_no_chunk(app, questions)
    if info["answerInNoChunk"]:
        print(f"warning: no indexed chunk of its file holds the answer of {info['answerInNoChunk']}: "
              "those questions cannot score by passage (fix their answer strings)", file=sys.stderr)
    return app, info, questions


def answer_in_no_chunk(app: Appliance, questions: list[dict]) -> list[str]:
    """The questions whose answer string no single chunk of their files holds: the data file was checked
    against the converted text, but a chunk boundary or a converter change can still split an answer."""
    root = app.settings.roots[0]
    missing = []
    for q in questions:
        texts = [normalise(chunk.text) for f in [q["file"], *q.get("alsoFiles", [])]
                 for chunk in app.index.reader.document_chunks(str(root / f))]
        if not any(normalise(q["answer"]) in text for text in texts):
            missing.append(q["id"])
    return missing


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
            doc = Path(hit.source).stem
            if doc not in ranked:
                ranked.append(doc)
        n, r = ndcg_recall(ranked, qrels[qid])
        ndcgs.append(n)
        recalls.append(r)
    times.sort()
    return {"nDCG@10": round(sum(ndcgs) / len(ndcgs), 4), "Recall@10": round(sum(recalls) / len(recalls), 4),
            "queries": len(ndcgs), "p50_ms": round(1000 * times[len(times) // 2], 1)}


def normalise(text: str) -> str:
    """Whitespace collapsed: a chunk keeps its document's line breaks, an answer is written on one line."""
    return " ".join(text.split())


def hit_files(hit: RankedHit, root: Path) -> list[str]:
    """The corpus paths one hit stands for: its own file and every file its passage was also found in
    (a passage found in several copies is one hit, the copies listed in alsoIn)."""
    sources = [hit.source, *(w.source for w in hit.also_in or [])]
    return [str(Path(s).relative_to(root)) for s in sources]


def judge(hits: list[RankedHit], question: dict, root: Path) -> tuple[int | None, int | None]:
    """The 1-based rank of the answering document among the distinct files of `hits` (its copies in
    `alsoFiles` count as the same document), and the rank of the first hit of that document whose
    text holds the answer."""
    answering = {question["file"], *question.get("alsoFiles", [])}
    ranked = list(dict.fromkeys("=answer" if f in answering else f for hit in hits for f in hit_files(hit, root)))
    file_rank = ranked.index("=answer") + 1 if "=answer" in ranked else None
    answer = normalise(question["answer"])
    passage_rank = next((i + 1 for i, hit in enumerate(hits)
                         if answering & set(hit_files(hit, root)) and answer in normalise(hit.text)), None)
    return file_rank, passage_rank


def xling_figures(ranks: list[tuple[int | None, int | None]]) -> dict[str, float]:
    """By file: nDCG@10 with one relevant document (1/log2(rank+1)) and Recall@10 (found in the top 10).
    By passage: the answer in the first hit, in the top 10 hits, and MRR@10."""
    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 4)

    files = [r for r, _ in ranks]
    passages = [r for _, r in ranks]
    return {"nDCG@10": mean([1 / math.log2(r + 1) if r and r <= 10 else 0.0 for r in files]),
            "Recall@10": mean([1.0 if r and r <= 10 else 0.0 for r in files]),
            "passageHit@1": mean([1.0 if r == 1 else 0.0 for r in passages]),
            "passageHit@10": mean([1.0 if r and r <= 10 else 0.0 for r in passages]),
            "passageMRR@10": mean([1 / r if r and r <= 10 else 0.0 for r in passages])}


def evaluate_xling(app: Appliance, questions: list[dict]) -> dict:
    """Every question through `Appliance.search`; the figures overall and per direction (document
    language → question language), and each question's file and passage rank (None: not in the 40 hits)."""
    root = app.settings.roots[0]
    ranks, times, by_direction = {}, [], {}
    for q in questions:
        started = time.perf_counter()
        result = app.search(q["question"], top_k=40)
        times.append(time.perf_counter() - started)
        ranks[q["id"]] = judge(result.results, q, root)
        by_direction.setdefault(f"{q['docLang']}->{q['lang']}", []).append(ranks[q["id"]])
    times.sort()
    return {**xling_figures(list(ranks.values())), "queries": len(ranks),
            "p50_ms": round(1000 * times[len(times) // 2], 1),
            "byDirection": {d: {**xling_figures(r), "queries": len(r)} for d, r in sorted(by_direction.items())},
            "ranks": {qid: {"file": f, "passage": p} for qid, (f, p) in ranks.items()}}


def run_weights(app: Appliance, weights: list[float | None], measure) -> dict:  # type: ignore[no-untyped-def]
    """`measure(app)` under every weight; None is the appliance's default ranking."""
    runs = {}
    for weight in weights:
        settings = app.settings if weight is None else replace(app.settings, hybrid_weight=weight)
        name = f"default (w={settings.hybrid_weight})" if weight is None else f"weight={weight}"
        runs[name] = measure(Appliance(settings, embedder=app.resources.embedder))
    return runs


def run_dataset(dataset: str, weights: list[float | None], model: str | None = None, budget: int | None = None,
                max_queries: int | None = None) -> dict:
    """Every weight on one dataset; None is the appliance's default ranking."""
    if dataset == XLING_NAME:
        app, out, questions = open_xling(model, budget)
        questions = questions[:max_queries] if max_queries else questions
        out["questions"] = len(questions)
        out["runs"] = run_weights(app, weights, lambda a: evaluate_xling(a, questions))
        return out
    corpus, queries, qrels = load(dataset, max_queries)
    app, out = open_app(dataset, corpus, model, budget)
    out["runs"] = run_weights(app, weights, lambda a: evaluate(a, queries, qrels))
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
    by_passage = XLING_NAME in table["datasets"]
    print(f"{'dataset':12} {'ranking':22} {'nDCG@10':>8} {'Recall@10':>10} {'queries':>8} {'p50 ms':>7}"
          + (f"   passage: {'hit@1':>6} {'hit@10':>6} {'MRR@10':>6}" if by_passage else ""))
    for dataset, out in table["datasets"].items():
        for name, f in out["runs"].items():
            print(f"{dataset:12} {label(name):22} {f['nDCG@10']:8.4f} {f['Recall@10']:10.4f} "
                  f"{f['queries']:8} {f['p50_ms']:7}{passage_columns(f)}")
    print(f"written to {out_path}")


def passage_columns(figures: dict) -> str:
    """The by-passage columns of a set judged by answer strings (corpus-xling); blank for the others."""
    if "passageHit@1" not in figures:
        return ""
    return (f"            {figures['passageHit@1']:6.4f} {figures['passageHit@10']:6.4f} "
            f"{figures['passageMRR@10']:6.4f}")


def rank_through_lancedb() -> None:
    """No memory budget for the in-memory replica in this process (Settings.replica_budget_bytes resolves to
    0), as a small container has for a large index: its syncs build LanceDB's approximate vector index and its
    queries rank through it (`--lancedb` here and in eval_manuals.py)."""
    from appliance import config

    config.REPLICA_MEMORY_CAP_BYTES = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", choices=sorted([*DATASETS, XLING_NAME]))
    parser.add_argument("--all", action="store_true", help="every dataset: vector only, BM25 only, default")
    parser.add_argument("--datasets", default=",".join([*DATASETS, XLING_NAME]), help="with --all: which datasets")
    parser.add_argument("--out", type=Path, default=CACHE / "quality.json", help="where --all writes its JSON")
    parser.add_argument("--model", default=None, help="MODEL_NAME (default: the appliance default)")
    parser.add_argument("--budget", type=int, default=None, help="CHUNK_TOKEN_BUDGET")
    parser.add_argument("--weights", default="1.0,0.0,0.6", help="comma-separated RAG_HYBRID_WEIGHT values")
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--lancedb", action="store_true",
                        help="rank through LanceDB's indexes, not the in-memory replica (no memory budget for it)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.lancedb:
        rank_through_lancedb()
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
        if "passageHit@1" in figures:
            print(f"  {'':22} by passage: hit@1 {figures['passageHit@1']:.4f}  hit@10 {figures['passageHit@10']:.4f}  "
                  f"MRR@10 {figures['passageMRR@10']:.4f}")


if __name__ == "__main__":
    main()
