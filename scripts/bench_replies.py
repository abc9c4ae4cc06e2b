#!/usr/bin/env python
"""Usage: scripts/bench_replies.py [--docs DIR | --sample N] [--status-calls N] [--json]

What an agent and an operator see, measured through a real MCP client over stdio
(`minirag serve`):

* the largest reply of every read tool, called with the arguments that make it
  largest (topK 100 with Markdown context, the biggest document read from its start,
  the widest neighbourhood, a grep for the commonest word with maxResults 500, the
  longest file listing), in characters of the tool's JSON result;
* `status` latency, warm (after a first call) and while `minirag sync --full` rebuilds
  the same index from another process: p50 / p95 / max over --status-calls calls.

Without --docs it copies the N largest files of ../shared/corpus that need no OCR
(the files that made the largest replies before replies were bounded) into a
throwaway folder; the index is throwaway too.
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
import time
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StdioTransport

ROOT = Path(__file__).resolve().parent.parent
MINIRAG = str(Path(sys.executable).with_name("minirag"))
READABLE = {".md", ".txt", ".html", ".htm", ".docx", ".pptx", ".xlsx", ".epub", ".ipynb", ".csv", ".json",
            ".rst", ".xml"}
"""The sample's formats: PDFs and images are left out (OCR takes minutes a file on 2 cores)."""


def sample(shared: Path, count: int, into: Path) -> list[Path]:
    files = [p for p in (shared / "corpus").rglob("*")
             if p.is_file() and p.suffix.lower() in READABLE and p.name != "EXPECTED.tsv"]
    files.sort(key=lambda p: p.stat().st_size, reverse=True)
    picked = files[:count]
    for i, p in enumerate(picked):
        shutil.copy2(p, into / f"{i:02d}-{p.name}")
    return picked


def reply_chars(result: Any) -> int:
    return sum(len(getattr(c, "text", "") or "") for c in result.content)


async def measure(env: dict[str, str], docs: Path, calls: int) -> dict[str, Any]:
    async with Client(StdioTransport(MINIRAG, ["serve"], env=env), timeout=600) as client:
        async def call(name: str, args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            result = await client.call_tool(name, args, raise_on_error=False)
            return reply_chars(result), result.structured_content or {}

        largest: dict[str, dict[str, Any]] = {}

        def keep(tool: str, size: int, args: dict[str, Any]) -> None:
            if size >= largest.get(tool, {}).get("chars", -1):
                largest[tool] = {"chars": size, "args": args}

        args: dict[str, Any] = {"limit": 500}
        size, _ = await call("list_files", args)
        keep("list_files", size, args)
        hits: list[dict[str, Any]] = []
        for query in ("the", "configuration and installation", "Übersicht", "документ"):
            for fmt in ("json", "markdown"):
                context = {"contextLines": 20} if fmt == "markdown" else {}
                args = {"query": query, "topK": 100, "format": fmt} | context
                size, found = await call("query_documents", args)
                keep("query_documents", size, args)
                hits = found.get("results") or hits
        for path in sorted(docs.rglob("*"), key=lambda p: -p.stat().st_size if p.is_file() else 0)[:5]:
            args = {"filePath": str(path)}
            size, _ = await call("read_file", args)
            keep("read_file", size, args)
        for h in hits[:5]:
            target = {"filePath": h["filePath"]} if h.get("filePath") else {"source": h["source"]}
            args = target | {"chunkIndex": h["chunkIndex"], "before": 50, "after": 50, "maxChars": 20000}
            size, _ = await call("read_chunk_neighbors", args)
            keep("read_chunk_neighbors", size, args)
        for pattern in ("the", "e", "и"):
            args = {"pattern": pattern, "maxResults": 500}
            size, _ = await call("grep", args)
            keep("grep", size, args)
        for tool in ("status", "list_roots", "sync_status"):
            size, _ = await call(tool, {})
            keep(tool, size, {})

        await client.call_tool("status", {})
        warm = []
        for _ in range(calls):
            started = time.perf_counter()
            await client.call_tool("status", {})
            warm.append(time.perf_counter() - started)
        sync = subprocess.Popen([MINIRAG, "sync", "--full", "--json"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        during: list[float] = []
        try:
            while sync.poll() is None and len(during) < calls:
                started = time.perf_counter()
                reply = await client.call_tool("status", {})
                during.append(time.perf_counter() - started)
                running = (reply.structured_content or {}).get("syncRunning")
                if not running and during:
                    during.pop()  # the sync had not started yet or was done: not "during"
                await asyncio.sleep(0.05)
        finally:
            sync.wait(timeout=3600)
        return {"largestReply": largest, "statusWarm": figures(warm), "statusDuringSync": figures(during)}


def figures(seconds: list[float]) -> dict[str, Any]:
    if not seconds:
        return {"calls": 0}
    ms = sorted(1000 * s for s in seconds)
    return {"calls": len(ms), "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 1), "max_ms": round(ms[-1], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path)
    parser.add_argument("--sample", type=int, default=25, help="largest corpus files to copy without --docs")
    parser.add_argument("--status-calls", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="minirag-replies-") as tmp:
        docs = args.docs
        if docs is None:
            shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
            if not (shared / "corpus").is_dir():
                sys.exit(f"error: {shared / 'corpus'} is missing (set MINIRAG_SHARED or pass --docs)")
            docs = Path(tmp) / "docs"
            docs.mkdir()
            sample(shared, args.sample, docs)
        env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MCP_INSTRUCTIONS_EXTRA")}
        env |= {"BASE_DIR": str(docs), "DB_PATH": str(Path(tmp) / "index")}
        started = time.perf_counter()
        done = subprocess.run([MINIRAG, "sync", "--json"], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: the first sync failed: {done.stderr[-2000:]}")
        report = json.loads(done.stdout)
        out = {"docs": str(docs), "files": report.get("added"), "syncSeconds": round(time.perf_counter() - started, 1),
               "load": os.getloadavg()[0]} | asyncio.run(measure(env, docs, args.status_calls))
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['files']} files synced in {out['syncSeconds']} s (load {out['load']:.1f})")
    for tool, row in sorted(out["largestReply"].items()):
        print(f"  largest {tool:22} {row['chars']:>8,} chars  {json.dumps(row['args'], ensure_ascii=False)[:90]}")
    for name in ("statusWarm", "statusDuringSync"):
        print(f"  {name:18} {out[name]}")


if __name__ == "__main__":
    main()
