#!/usr/bin/env python
"""Usage: scripts/bench_answers.py [--index DIR] [--top-k N] [--json]

How much an agent reads to get its answer: every question of our own question set
(scripts/eval_data/corpus_crosslingual.jsonl: a question, the corpus file that answers
it, the answer string) is asked through a real MCP client over stdio (`minirag serve`)
with query_documents' default arguments, and for each reply we count

* its size: characters of the JSON text a client receives, and tokens of it by the
  embedding model's tokenizer (an XLM-R SentencePiece vocabulary; a chat model's
  tokenizer gives a similar count within ~20%);
* whether the answer string is in it (case and whitespace folded), and whether it is
  in a hit's own text (`results[].text`) or only in the section around it (`parents`).

Every `sections` mode the tool offers is measured (older versions offer none: their
one default is measured). The files the questions name are copied from
../shared/corpus (MINIRAG_SHARED) into a folder beside the index; `--index DIR` keeps
both for the next run (the same index serves runs of another version of the code).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StdioTransport

ROOT = Path(__file__).resolve().parent.parent
MINIRAG = str(Path(sys.executable).with_name("minirag"))
QUESTIONS = ROOT / "scripts" / "eval_data" / "corpus_crosslingual.jsonl"
TOKENIZER = ROOT / "models" / "baked" / "intfloat__multilingual-e5-small" / "tokenizer.json"


def fold(text: str) -> str:
    return " ".join(text.casefold().split())


def place(shared: Path, questions: list[dict[str, Any]], docs: Path) -> int:
    """Copy every file a question names into `docs` at its corpus path; how many."""
    (docs / ".git").mkdir(parents=True, exist_ok=True)  # a repository top: no enclosing .gitignore applies
    names = {f for q in questions for f in [q["file"], *q.get("alsoFiles", [])]}
    for rel in names:
        target = docs / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(shared / "corpus" / rel, target)
    return len(names)


async def ask(env: dict[str, str], questions: list[dict[str, Any]], top_k: int | None) -> dict[str, Any]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    async with Client(StdioTransport(MINIRAG, ["serve"], env=env), timeout=600) as client:
        tools = {t.name: t for t in await client.list_tools()}
        prop = tools["query_documents"].input_schema["properties"].get("sections")
        modes: list[str | None] = [None, *[m for m in (prop or {}).get("enum", []) if m != prop.get("default")]]
        out: dict[str, Any] = {}
        for mode in modes:
            rows = []
            for q in questions:
                args: dict[str, Any] = {"query": q["question"]} | ({"topK": top_k} if top_k else {}) \
                    | ({"sections": mode} if mode else {})
                result = await client.call_tool("query_documents", args, raise_on_error=False)
                text = "".join(getattr(c, "text", "") or "" for c in result.content)
                data = result.structured_content or {}
                answer = fold(q["answer"])
                in_hits = any(answer in fold(h.get("text") or "") for h in data.get("results", []))
                rows.append({"id": q["id"], "chars": len(text), "tokens": len(tokenizer.encode(text).ids),
                             "parentsChars": len(json.dumps(data.get("parents") or {}, ensure_ascii=False)),
                             "answerInReply": answer in fold(strings(data)),
                             "answerInHits": in_hits})
            out[mode or "default"] = summary(rows)
        return out


def strings(value: Any) -> str:
    """Every string in a JSON value, one a line: the reply's text as a reader sees it (no escapes)."""
    if isinstance(value, dict):
        return "\n".join(strings(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(strings(v) for v in value)
    return value if isinstance(value, str) else ""


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def figures(key: str) -> dict[str, float]:
        values = sorted(r[key] for r in rows)
        return {"median": statistics.median(values), "mean": round(statistics.fmean(values)),
                "p90": values[min(len(values) - 1, int(0.9 * len(values)))], "max": values[-1]}

    return {"questions": len(rows), "answerInReply": sum(r["answerInReply"] for r in rows),
            "answerInHits": sum(r["answerInHits"] for r in rows), "chars": figures("chars"),
            "tokens": figures("tokens"), "parentsChars": figures("parentsChars"), "perQuestion": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, help="keep the copied files and the index here (reused when present)")
    parser.add_argument("--top-k", type=int, help="topK to ask with (default: the tool's own default)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
    if not (shared / "corpus").is_dir():
        sys.exit(f"error: {shared / 'corpus'} is missing (set MINIRAG_SHARED)")
    questions = [json.loads(line) for line in QUESTIONS.open(encoding="utf-8") if line.strip()]
    with tempfile.TemporaryDirectory(prefix="minirag-answers-") as tmp:
        base = args.index or Path(tmp)
        docs = base / "docs"
        files = place(shared, questions, docs)
        env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MCP_INSTRUCTIONS_EXTRA")}
        env |= {"BASE_DIR": str(docs), "DB_PATH": str(base / "index")}
        done = subprocess.run([MINIRAG, "sync", "--json"], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: the sync failed: {done.stderr[-2000:]}")
        out = {"files": files, "questions": len(questions), "topK": args.top_k,
               "modes": asyncio.run(ask(env, questions, args.top_k))}
    if args.json:
        print(json.dumps(out, indent=1, ensure_ascii=False))
        return
    print(f"{out['questions']} questions over {files} files (topK {args.top_k or 'default'})")
    for mode, s in out["modes"].items():
        print(f"  sections={mode:8} answer in reply {s['answerInReply']}/{s['questions']} "
              f"(in a hit's text {s['answerInHits']}), reply chars median {s['chars']['median']:,} "
              f"p90 {s['chars']['p90']:,} max {s['chars']['max']:,}; tokens median {s['tokens']['median']:,} "
              f"p90 {s['tokens']['p90']:,} max {s['tokens']['max']:,}; parents chars median "
              f"{s['parentsChars']['median']:,}")


if __name__ == "__main__":
    main()
