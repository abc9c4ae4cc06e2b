#!/usr/bin/env python3
"""What `minirag sync` costs when little or nothing changed: a folder of short Markdown files,
synced once, then re-synced with no change and after editing a few files.

Usage: bench_small_change.py [--files 1000] [--edits 10] [--rounds 3] [--work DIR] [--beside-server] [--json]

Each figure is the wall time of a whole `minirag sync` process (start-up, imports, the
model when something needs embedding, the sync, exit), the median of --rounds runs, next
to the seconds the sync itself reports and the process's CPU time (user + system), which
is less sensitive to other load on a shared machine. The text is real: SciFact abstracts
(../shared, or $MINIRAG_SHARED), one per file; each edit appends a sentence to a file. With
--work DIR the folder and index are kept there, and a later run over the same DIR skips the
first sync (to compare two versions of the code over one index: PYTHONPATH=OTHER_TREE).
With --beside-server a warm `minirag serve` runs on the same index (started, handshaken and
its tools listed, as an MCP client does, before the rounds), so `minirag sync` hands its sync
to it (appliance/sync/handoff.py); each run reports whether it did.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from appliance.sync.handoff import SOCKET_NAME  # noqa: E402
from appliance.sync.state import read_last_sync  # noqa: E402
from tests.adapters.test_start_path import RawStdio  # noqa: E402

MINIRAG = str(Path(sys.executable).with_name("minirag"))


def _abstracts(limit: int) -> list[str]:
    shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
    corpus = shared / "eval" / "retrieval" / "scifact" / "corpus.jsonl"
    if not corpus.is_file():
        sys.exit(f"bench_small_change: {corpus} is missing (set MINIRAG_SHARED to the shared folder)")
    texts = []
    with corpus.open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            texts.append(f"# {doc.get('title') or doc['_id']}\n\n{doc['text']}\n")
            if len(texts) == limit:
                break
    return texts


def _sync(env: dict[str, str]) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([MINIRAG, "sync"], env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"bench_small_change: minirag sync failed:\n{done.stderr[-2000:]}")
    report = read_last_sync(Path(env["DB_PATH"])) or {}  # what the sync did, whichever process ran it
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "sync_s": float(report.get("seconds", 0.0)), "updated": report.get("updated", 0) + report.get("added", 0),
            "embedded": report.get("chunksEmbedded", 0), "handed_off": float("run by the warm server" in done.stderr)}


def _warm_server(env: dict[str, str]) -> RawStdio:
    """`minirag serve` on the index, handshaken and its tools listed (which starts its warm-up),
    once it takes sync requests."""
    server = RawStdio([MINIRAG, "serve"], env)
    server.handshake()
    server.send(2, "tools/list")
    server.reply(2)
    deadline = time.monotonic() + 300
    while not (Path(env["DB_PATH"]) / SOCKET_NAME).exists():
        if time.monotonic() > deadline or server.proc.poll() is not None:
            sys.exit("bench_small_change: the server never took sync requests")
        time.sleep(0.2)
    return server


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(run[key] for run in runs), 2) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--edits", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, help="keep the folder and index here (reused when present)")
    parser.add_argument("--beside-server", action="store_true",
                        help="a warm `minirag serve` on the index runs the syncs (after the first)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="minirag-bench-small-"))
    try:
        docs = work / "docs"
        reuse = (work / "index").is_dir()
        files = []
        for n, text in enumerate(_abstracts(args.files)):
            path = docs / f"d{n // 100:02d}" / f"abstract-{n:05d}.md"
            if not reuse:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, "utf-8")
            files.append(path)
        env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME")}
        env |= {"BASE_DIR": str(docs), "DB_PATH": str(work / "index")}
        first = _sync(env) if not reuse else {}
        server = _warm_server(env) if args.beside_server else None
        no_change = [_sync(env) for _ in range(args.rounds)]
        edited = []
        for r in range(args.rounds):
            for i, path in enumerate(files[r * args.edits:(r + 1) * args.edits]):
                with path.open("a", encoding="utf-8") as fh:
                    fh.write(f"\nRevision {r}.{i}: the authors corrected the sample size in the methods.\n")
            edited.append(_sync(env))
        if server is not None:
            server.close()
        figures = {"files": len(files), "edits": args.edits, "rounds": args.rounds,
                   "beside_server": args.beside_server,
                   "first_sync": {k: round(v, 2) for k, v in first.items()},
                   "no_change": _median(no_change), "edited": _median(edited),
                   "load_average": round(os.getloadavg()[0], 1)}
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{figures['files']} files; first sync {figures['first_sync'].get('wall_s', '(reused)')} s")
    for name in ("no_change", "edited"):
        f = figures[name]
        label = "no change" if name == "no_change" else f"{args.edits} files edited"
        print(f"{label:17} minirag sync {f['wall_s']} s wall, {f['cpu_s']} s CPU, sync itself {f['sync_s']} s "
              f"({f['updated']:g} files, {f['embedded']:g} chunks embedded; median of {args.rounds}"
              + ("; handed to the warm server" if f["handed_off"] else "") + ")")
    print(f"load average {figures['load_average']} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
