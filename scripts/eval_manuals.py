#!/usr/bin/env python3
"""Answer passages in long manuals (en/de/ru), asked through the MCP server: does the passage come back?

Usage: eval_manuals.py [--weights default,0.0,1.0] [--top-k 10] [--lancedb] [--out FILE] [--json]

The documents are Debian documentation packages (scripts/manuals_set.py fetches and unpacks the
pinned versions); the questions are ours (scripts/eval_data/manuals_questions.jsonl), each with
the short snippet of its document that answers it, a third of them asked in another language
than their document. Every question goes to `query_documents` (topK 10) of the real MCP server
(fastmcp's in-memory client) over one cached index of all the manuals. A hit answers when it
comes from the question's file and its text or its parent section holds the snippet (whitespace
collapsed, case kept). Reported per question language, for cross-lingual questions, for exact-
wording and paraphrased ones: answer-passage hit@1, hit@5, MRR@10, and by file nDCG@10 and hit@5;
for the default ranking, vector only (weight 0) and keyword only (weight 1).

`--lancedb` gives the processes no memory budget for the in-memory replica, as a small container gives a
large index: the sync builds LanceDB's approximate vector index over the manuals and every question is
ranked through it (the next run without it drops that index again).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]

from manuals_set import build, load_questions  # noqa: E402

NAME = "manuals"
GROUPS: dict[str, Callable[[dict], bool]] = {
    "all": lambda q: True,
    "en": lambda q: q["lang"] == "en",
    "de": lambda q: q["lang"] == "de",
    "ru": lambda q: q["lang"] == "ru",
    "cross-lingual": lambda q: q["lang"] != q["docLang"],
    "same-language": lambda q: q["lang"] == q["docLang"],
    "exact": lambda q: q["kind"] == "exact",
    "paraphrase": lambda q: q["kind"] == "paraphrase",
}
"""The rows of the table: which questions each figure is averaged over (by the question's language)."""


def normalise(text: str) -> str:
    """Whitespace collapsed: a snippet is written on one line, a passage keeps its line breaks."""
    return " ".join(text.split())


def ranks(hits: Sequence[dict], parents: dict[str, str], question: dict, root: Path) -> tuple[int | None, int | None]:
    """The 1-based rank of the question's file among the hits' distinct files, and of the first hit
    of that file whose text or parent section (`parents`: parentId -> section text) holds the snippet."""
    wanted = str(root / question["file"])
    files = list(dict.fromkeys(h["source"] for h in hits))
    file_rank = files.index(wanted) + 1 if wanted in files else None
    snippet = normalise(question["snippet"])
    passage_rank = next((i + 1 for i, h in enumerate(hits) if h["source"] == wanted and (
        snippet in normalise(h["text"]) or snippet in normalise(parents.get(h["parentId"], "")))), None)
    return file_rank, passage_rank


def figures(found: Sequence[tuple[int | None, int | None]]) -> dict[str, float | int]:
    """Answer passage: hit@1, hit@5, MRR@10; file: nDCG@10 (one relevant file) and hit@5."""
    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 4) if values else 0.0

    files = [f for f, _ in found]
    passages = [p for _, p in found]
    return {"passageHit@1": mean([1.0 if p == 1 else 0.0 for p in passages]),
            "passageHit@5": mean([1.0 if p and p <= 5 else 0.0 for p in passages]),
            "passageMRR@10": mean([1 / p if p and p <= 10 else 0.0 for p in passages]),
            "fileNDCG@10": mean([1 / math.log2(f + 1) if f and f <= 10 else 0.0 for f in files]),
            "fileHit@5": mean([1.0 if f and f <= 5 else 0.0 for f in files]),
            "questions": len(found)}


def grouped(questions: Sequence[dict], found: dict[str, tuple[int | None, int | None]]) -> dict[str, dict]:
    return {name: figures([found[q["id"]] for q in questions if keep(q)]) for name, keep in GROUPS.items()}


def open_manuals(sync: bool = True) -> tuple[Any, dict]:
    """The manuals' cached index (built and synced on first use) and its description."""
    from eval_retrieval import open_index

    # The Debian Edu manual (a 100-page PDF) needs minutes to convert on a busy machine; the default
    # 180 s timeout would leave it out, and a failed file is not retried until it changes.
    os.environ.setdefault("CONVERT_TIMEOUT", "1800")
    docs = build()
    count = sum(1 for p in docs.rglob("*") if p.is_file() and ".git" not in p.parts and p.name != ".complete")
    return open_index(NAME, docs, count, sync=sync)


def ask_all(app: Any, questions: Sequence[dict], top_k: int) -> tuple[dict[str, tuple[int | None, int | None]], float]:
    """Every question through the MCP server's `query_documents`; each one's ranks, and the median seconds."""
    from fastmcp import Client

    from appliance.adapters.mcp_server import create_server
    from appliance.adapters.runtime import Runtime
    from appliance.config import read_environment

    server = create_server(Runtime.serving(app, read_environment({})))
    root = app.settings.roots[0]

    async def run() -> tuple[dict[str, tuple[int | None, int | None]], list[float]]:
        out, times = {}, []
        async with Client(server) as client:
            for q in questions:
                started = time.perf_counter()
                reply = await client.call_tool("query_documents", {"query": q["question"], "topK": top_k},
                                               raise_on_error=True)
                times.append(time.perf_counter() - started)
                answer = reply.structured_content or {}
                hits = answer.get("results", [])
                out[q["id"]] = ranks(hits, section_texts(app, hits, answer.get("parents", {})), q, root)
        return out, times

    found, times = asyncio.run(run())
    times.sort()
    return found, times[len(times) // 2]


def section_texts(app: Any, hits: Sequence[dict], parents: dict[str, str]) -> dict[str, str]:
    """Each hit's parent section text: from the reply, or read from the index when the reply's text
    budget left it out (the snippet is judged against the section, not against what fitted)."""
    from appliance.ingest.chunk import section_text

    missing = sorted({h["parentId"] for h in hits} - set(parents))
    if not missing:
        return parents
    chunks = app.index.reader.section_chunks(missing)
    out = dict(parents)
    for pid in missing:
        out[pid] = section_text([c.to_chunk() for c in sorted(chunks, key=lambda c: c.chunk_index)
                                 if c.parent_id == pid])
    return out


def run(weights: Sequence[float | None], top_k: int = 10) -> dict:
    """Every ranking on the manuals: the figures per group and each question's ranks."""
    from appliance.service import Appliance

    app, info = open_manuals()
    questions = load_questions()
    info["questions"] = len(questions)
    info["runs"] = {}
    for weight in weights:
        settings = app.settings if weight is None else replace(app.settings, hybrid_weight=weight)
        name = {0.0: "vector only", 1.0: "keyword only"}.get(weight, f"weight={weight}") \
            if weight is not None else f"default (w={settings.hybrid_weight})"
        found, median = ask_all(Appliance(settings, embedder=app.resources.embedder), questions, top_k)
        info["runs"][name] = {"groups": grouped(questions, found), "p50_ms": round(1000 * median, 1),
                              "ranks": {qid: {"file": f, "passage": p} for qid, (f, p) in found.items()}}
    return info


def table(out: dict) -> str:
    lines = [f"{NAME}: {out['docs']} files, {out['chunks']} chunks, {out['questions']} questions, model {out['model']}",
             f"{'ranking':20} {'questions':16} {'n':>3}   passage: {'hit@1':>6} {'hit@5':>6} {'MRR@10':>6}"
             f"   file: {'nDCG@10':>7} {'hit@5':>6}"]
    for name, run_ in out["runs"].items():
        for group, f in run_["groups"].items():
            lines.append(f"{name:20} {group:16} {f['questions']:3}            {f['passageHit@1']:6.3f} "
                         f"{f['passageHit@5']:6.3f} {f['passageMRR@10']:6.3f}         {f['fileNDCG@10']:7.3f} "
                         f"{f['fileHit@5']:6.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="default,0.0,1.0",
                        help="comma-separated RAG_HYBRID_WEIGHT values; `default` is the appliance's")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="also write the figures there as JSON")
    parser.add_argument("--lancedb", action="store_true",
                        help="rank through LanceDB's indexes, not the in-memory replica (no memory budget for it)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.lancedb:
        from eval_retrieval import rank_through_lancedb

        rank_through_lancedb()
    weights = [None if w == "default" else float(w) for w in args.weights.split(",")]
    out = run(weights, args.top_k)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=2) if args.json else table(out))


if __name__ == "__main__":
    main()
