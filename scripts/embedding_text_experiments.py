#!/usr/bin/env python3
"""Which text of a chunk goes into its vector: variants measured on the shared sets, vector side only.

Usage: embedding_text_experiments.py [--datasets scifact,cranfield,xquad-multi] [--variants now,title-all]
                                     [--max-queries N] [--max-docs N] [--json]

Every corpus document is cut exactly as a sync cuts it (`# title` + text, the appliance's
budget and model); each variant decides the text embedded for a chunk; a document scores
the best cosine of its chunks; nDCG@10 / Recall@10 by document. The stored text and the
BM25 side are the same in every variant, so the vector side alone shows the difference.
Vectors are cached by text under .cache/eval/embedding-text/ (a variant that leaves a
chunk's text as it is costs nothing). `--max-docs N` keeps every document some query
judges relevant and fills up to N with the others in corpus order: a smaller haystack
(absolute figures rise), for comparing variants when the machine is busy.

Variants:
  now          the rule before this script: chunk 0 gets the title once when its text lacks it
  title-all    every chunk whose text lacks the title gets `# title` in front (within the window)
  title-plain  as title-all, with Markdown heading marks (`#`) taken off the start of lines
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from eval_retrieval import CACHE, load, ndcg_recall  # noqa: E402

from appliance.config import load_settings  # noqa: E402
from appliance.ingest.chunk import chunk_document  # noqa: E402
from appliance.ingest.titles import choose_title  # noqa: E402
from appliance.service import Appliance  # noqa: E402

_HEADING_MARK = re.compile(r"^#{1,6}\s+", re.M)


def _fits(embedder, text: str) -> bool:  # type: ignore[no-untyped-def]
    return embedder.count_tokens(text) <= embedder.window


def variants(embedder) -> dict[str, Callable[[str, int, str | None], str]]:  # type: ignore[no-untyped-def]
    def now(text: str, index: int, title: str | None) -> str:
        if index != 0 or not title or title in text:
            return text
        with_title = f"# {title}\n{text}"
        return with_title if _fits(embedder, with_title) else text

    def title_all(text: str, index: int, title: str | None) -> str:
        if not title or title in text:
            return text
        with_title = f"# {title}\n{text}"
        return with_title if _fits(embedder, with_title) else text

    def title_plain(text: str, index: int, title: str | None) -> str:
        return _HEADING_MARK.sub("", title_all(text, index, title))

    return {"now": now, "title-all": title_all, "title-plain": title_plain}


class VectorCache:
    """Passage vectors by text, kept on disk between runs."""

    def __init__(self, path: Path, embed: Callable[[list[str]], np.ndarray]) -> None:
        self.path, self.embed = path, embed
        self.vectors: dict[str, np.ndarray] = {}
        if path.exists():
            data = np.load(path)
            self.vectors = {k: data[k] for k in data.files}

    def get(self, texts: list[str]) -> np.ndarray:
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in self.vectors}.items())
        for start in range(0, len(missing), 256):
            part = missing[start:start + 256]
            for (k, _), v in zip(part, self.embed([t for _, t in part]), strict=True):
                self.vectors[k] = v
        if missing:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(self.path, **self.vectors)
        return np.stack([self.vectors[k] for k in keys])


def run(dataset: str, app: Appliance, names: list[str], max_queries: int | None,
        max_docs: int | None) -> dict[str, dict[str, float]]:
    corpus, queries, qrels = load(dataset, max_queries)
    if max_docs:
        judged = {d for rel in qrels.values() for d in rel}
        others = [d for d in corpus if d["_id"] not in judged][:max(0, max_docs - len(judged))]
        corpus = [d for d in corpus if d["_id"] in judged] + others
    embedder = app.resources.embedder
    chunks: list[tuple[str, int, str, str | None]] = []  # doc id, chunk index, text, title
    for doc in corpus:
        title = (doc.get("title") or "").strip()
        markdown = f"# {title}\n\n{doc['text']}\n" if title else f"{doc['text']}\n"
        chosen = choose_title(metadata_title=None, markdown=markdown, path=Path(f"{doc['_id']}.md"))
        for c in chunk_document(markdown, count_tokens=embedder.count_tokens, budget=app.resources.budget,
                                title=chosen, ceiling=embedder.window):
            chunks.append((doc["_id"], c.index, c.text, chosen))
    doc_ids = [d for d, _, _, _ in chunks]
    cache = VectorCache(CACHE / "embedding-text" / f"{dataset}-{app.spec.id.replace('/', '__')}.npz",
                        embedder.embed_passages)
    q_ids = list(queries)
    q_vecs = embedder.embed_queries([queries[q] for q in q_ids])
    out: dict[str, dict[str, float]] = {}
    for name, rule in ((n, variants(embedder)[n]) for n in names):
        started = time.perf_counter()
        texts = [rule(text, index, title) for _, index, text, title in chunks]
        vecs = cache.get(texts)
        scores = q_vecs @ vecs.T
        ndcgs, recalls = [], []
        for qi, qid in enumerate(q_ids):
            best: dict[str, float] = {}
            for ci in np.argsort(-scores[qi])[:200]:
                best.setdefault(doc_ids[ci], float(scores[qi, ci]))
            n, r = ndcg_recall(list(best), qrels[qid])
            ndcgs.append(n)
            recalls.append(r)
        changed = sum(1 for t, (_, _, text, _) in zip(texts, chunks, strict=True) if t != text)
        out[name] = {"nDCG@10": round(sum(ndcgs) / len(ndcgs), 4),
                     "Recall@10": round(sum(recalls) / len(recalls), 4),
                     "chunksChanged": changed, "chunks": len(chunks),
                     "seconds": round(time.perf_counter() - started, 1)}
        print(f"{dataset:12} {name:12} nDCG@10 {out[name]['nDCG@10']:.4f}  Recall@10 "
              f"{out[name]['Recall@10']:.4f}  ({changed} of {len(chunks)} chunks differ from the stored text)",
              file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="scifact,cranfield,xquad-multi")
    parser.add_argument("--variants", default="now,title-all,title-plain")
    parser.add_argument("--max-queries", type=int)
    parser.add_argument("--max-docs", type=int)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    app = Appliance(load_settings(dict(os.environ), base_dirs=[str(CACHE)]))
    names = args.variants.split(",")
    table = {name: run(name, app, names, args.max_queries, args.max_docs) for name in args.datasets.split(",")}
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        for dataset, rows in table.items():
            for name, figures in rows.items():
                print(f"{dataset:12} {name:12} {figures['nDCG@10']:.4f} / {figures['Recall@10']:.4f}")


if __name__ == "__main__":
    main()
