#!/usr/bin/env python3
"""Sync and query figures with the index in a bucket beside the same index on local disk.

Usage: bench_object_storage.py [--files 300] [--queries 200] [--json]

Writes `--files` Markdown notes (deterministic text from samples/), then for each place (a local directory,
and s3://bench/index on moto's S3 server started on loopback, tests/fixtures/s3_server.py) with the real model:
a first sync, a sync with nothing changed, a sync after one file changed, one after ten files were removed (in a
bucket a delete is a merge bound by the deadline: storage.tables.Tables.delete_rows), and `--queries` warm searches
(p50 / p95). moto is an emulator in a Python process on the same 2 cores, so the bucket figures are the appliance's own
cost over HTTP plus moto's, not a cloud bucket's (which adds the network's round trips to every request).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import DEFAULT_MODEL, load_settings  # noqa: E402
from appliance.embed import OnnxEmbedder, load_spec  # noqa: E402
from appliance.models.manifest import default_models_dir  # noqa: E402
from appliance.service import Appliance  # noqa: E402
from tests.fixtures.s3_server import start_s3_server  # noqa: E402


def _write_notes(docs: Path, count: int) -> list[str]:
    """`count` notes of sentences from samples/ shuffled per note; returns one sentence per note to query."""
    words = " ".join(p.read_text("utf-8", "replace") for p in sorted((ROOT / "samples").glob("*.md"))).split()
    rng = random.Random(7)
    questions = []
    for i in range(count):
        sentences = [" ".join(rng.choices(words, k=rng.randint(8, 18))) + "." for _ in range(12)]
        (docs / f"note{i:04}.md").write_text(f"# Note {i}\n\n" + "\n\n".join(sentences) + "\n", "utf-8")
        questions.append(sentences[3])
    return questions


def _measure(env: dict[str, str], docs: Path, questions: list[str], queries: int, embedder: OnnxEmbedder,
             models_dir: Path, requests: Path | None = None) -> dict[str, Any]:
    app = Appliance(load_settings({**env, "BASE_DIR": str(docs), "MODELS_DIR": str(models_dir)}), embedder=embedder)
    figures: dict[str, Any] = {}
    started = time.perf_counter()
    report = app.sync()
    figures["first_sync_s"] = round(time.perf_counter() - started, 2)
    figures["chunks"] = report.chunks
    started = time.perf_counter()
    app.sync()
    figures["no_change_sync_s"] = round(time.perf_counter() - started, 2)
    changed = docs / "note0000.md"
    original = changed.read_text("utf-8")
    changed.write_text(original + "\nOne more line about the espresso machine.\n", "utf-8")
    started = time.perf_counter()
    app.sync()
    figures["one_file_changed_sync_s"] = round(time.perf_counter() - started, 2)
    changed.write_text(original, "utf-8")
    removed = sorted(docs.glob("*.md"))[-10:]
    texts = {path: path.read_text("utf-8") for path in removed}
    for path in removed:
        path.unlink()
    started = time.perf_counter()
    app.sync()
    figures["ten_files_removed_sync_s"] = round(time.perf_counter() - started, 2)
    for path, text in texts.items():
        path.write_text(text, "utf-8")
    app.sync()  # the index holds every note again before the queries
    app.search(questions[0])  # warm: the model, the tables, the replica
    logged = _lines(requests)
    times = []
    for i in range(queries):
        started = time.perf_counter()
        app.search(questions[i % len(questions)], top_k=10)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    if requests is not None:
        time.sleep(0.5)  # the server's log catches up
        figures["requests_per_query"] = round((_lines(requests) - logged) / queries, 2)
    figures["query_p50_ms"] = round(statistics.median(times), 1)
    figures["query_p95_ms"] = round(times[int(len(times) * 0.95) - 1], 1)
    return figures


def _lines(log: Path | None) -> int:
    """Requests the S3 server has logged so far (a line each)."""
    return 0 if log is None else log.read_bytes().count(b" HTTP/1.1\" ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    models_dir = default_models_dir()
    embedder = OnnxEmbedder(load_spec(DEFAULT_MODEL, models_dir), models_dir)
    results: dict[str, Any] = {"files": args.files, "queries": args.queries}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        questions = _write_notes((base / "docs").mkdir() or base / "docs", args.files)
        embedder.embed_passages(questions[:64])  # warm, so the first place measured pays no start-up
        results["local"] = _measure({"DB_PATH": str(base / "local-index")}, base / "docs", questions, args.queries,
                                    embedder, models_dir)
        log = base / "s3-requests.log"
        server = start_s3_server(log=log)
        try:
            server.create_bucket("bench")
            results["bucket"] = _measure({**server.env("bench"), "STATE_DIR": str(base / "state")}, base / "docs",
                                         questions, args.queries, embedder, models_dir, requests=log)
        finally:
            server.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.files} files, {results['local']['chunks']} chunks, {args.queries} warm queries")
    for key in ("first_sync_s", "no_change_sync_s", "one_file_changed_sync_s", "ten_files_removed_sync_s",
                "query_p50_ms", "query_p95_ms"):
        print(f"  {key:26} local {results['local'][key]:>8}   bucket {results['bucket'][key]:>8}")
    print(f"  S3 requests per query: {results['bucket']['requests_per_query']}")


if __name__ == "__main__":
    main()
