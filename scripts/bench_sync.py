#!/usr/bin/env python3
"""Sync speed when little changed: N generated files, a no-change sync, 1% edited, then every file touched.

Usage: bench_sync.py [--files 10000] [--json]

Times are measured inside one process around `Appliance.sync()`, so they
exclude interpreter start-up and imports. The first (full) sync embeds every
file once and is reported too, as chunks/s next to the model's raw rate on
the same texts. "Touched" gives every file a new mtime and the same bytes (a copy without -p, a fresh
checkout): the sync hashes each file and records its new time, embedding nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402

WORDS = ["harbour", "lantern", "meadow", "copper", "violin", "orbit", "basalt", "ferry", "quartz", "glacier", "ledger",
         "turbine", "река", "мост", "город", "ветер", "поле", "Haus", "Brücke", "Wald", "Stadt", "Fluss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(1)
    work = Path(tempfile.mkdtemp(prefix="minirag-bench-sync-"))
    try:
        docs = work / "docs"
        for n in range(args.files):
            folder = docs / f"d{n // 500:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"note-{n:05d}.md").write_text(f"Note {n}: " + " ".join(rng.choices(WORDS, k=12)) + "\n")
        app = Appliance(load_settings({}, base_dirs=[str(docs)], db_path=str(work / "index")))
        started = time.perf_counter()
        first = app.sync()
        full_s = time.perf_counter() - started
        texts = [p.read_text() for p in sorted(docs.rglob("*.md"))[:500]]
        started = time.perf_counter()
        app.resources.embedder.embed_passages(texts)
        raw_rate = len(texts) / (time.perf_counter() - started)

        started = time.perf_counter()
        again = app.sync()
        unchanged_s = time.perf_counter() - started
        assert again.unchanged == args.files, again.to_dict()

        edited = rng.sample(sorted(docs.rglob("*.md")), max(1, args.files // 100))
        for path in edited:
            path.write_text(path.read_text() + "edited\n")
        started = time.perf_counter()
        touched = app.sync()
        touched_s = time.perf_counter() - started
        assert touched.updated == len(edited), touched.to_dict()

        later = time.time_ns() + 10**9
        for path in docs.rglob("*.md"):
            os.utime(path, ns=(later, later))
        started = time.perf_counter()
        refreshed = app.sync()
        refreshed_s = time.perf_counter() - started
        assert refreshed.refreshed == args.files and refreshed.chunks == 0, refreshed.to_dict()
        out = {
            "files": args.files,
            "fullSyncSeconds": round(full_s, 1), "fullSyncChunksPerSecond": round(first.chunks / full_s, 1),
            "rawEmbedChunksPerSecond": round(raw_rate, 1),
            "fullSyncShareOfRawRate": round(first.chunks / full_s / raw_rate, 2),
            "noChangeSyncSeconds": round(unchanged_s, 3),
            "noChangeFilesPerSecond": round(args.files / unchanged_s),
            "onePercentEditedSeconds": round(touched_s, 2), "edited": len(edited),
            "everyFileTouchedSeconds": round(refreshed_s, 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['files']} files: full sync {out['fullSyncSeconds']} s ({out['fullSyncChunksPerSecond']} chunks/s, "
              f"{out['fullSyncShareOfRawRate']:.0%} of the raw embedding rate {out['rawEmbedChunksPerSecond']}/s); "
              f"no-change sync {out['noChangeSyncSeconds']} s = {out['noChangeFilesPerSecond']} files/s; "
              f"{out['edited']} edited: {out['onePercentEditedSeconds']} s; "
              f"every file touched: {out['everyFileTouchedSeconds']} s")


if __name__ == "__main__":
    main()
