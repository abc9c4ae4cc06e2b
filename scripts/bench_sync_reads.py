#!/usr/bin/env python3
"""Rows the search replica reads while a sync commits and queries run: per commit, against the whole table.

Usage: bench_sync_reads.py [--files 300] [--json]

Writes `--files` SciFact abstracts (one Markdown file each) into a temporary folder,
syncs it in one thread and runs queries back to back in another, then reports the
commits the queries saw, the rows the replica read in full, and the rows a whole
re-read per commit would have read (the table's size at each refresh).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
    corpus = (shared / "eval/retrieval/scifact/corpus.jsonl").open(encoding="utf-8")
    queries = [json.loads(line)["text"] for line in (shared / "eval/retrieval/scifact/queries.jsonl").open()]
    with tempfile.TemporaryDirectory() as tmp:
        docs, index = Path(tmp) / "docs", Path(tmp) / "index"
        docs.mkdir()
        for line in itertools.islice(corpus, args.files):
            doc = json.loads(line)
            (docs / f"{doc['_id']}.md").write_text(f"# {doc['title']}\n\n{doc['text']}\n", "utf-8")
        app = Appliance(load_settings(dict(os.environ) | {"BASE_DIR": str(docs), "DB_PATH": str(index)}))
        app.sync(next(docs.iterdir()))  # the index exists before the queries start
        sync = threading.Thread(target=app.sync)
        sync.start()
        versions, whole, count = set(), 0, 0
        while sync.is_alive():
            app.search(queries[count % len(queries)], top_k=10)
            count += 1
            replica = app.index.reader._replica
            if replica is not None and replica.version not in versions:
                versions.add(replica.version)
                whole += replica.rows.num_rows
        sync.join()
        out = {"files": args.files, "chunks": app.index.registry.count_chunks(), "queries": count,
               "refreshes": len(versions), "rows_read": app.index.reader.replica_rows_read,
               "whole_table_rows": whole}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['queries']} queries during a sync of {out['files']} files ({out['chunks']} chunks): "
              f"{out['refreshes']} refreshes read {out['rows_read']} rows; "
              f"a whole re-read per refresh reads {out['whole_table_rows']}")


if __name__ == "__main__":
    main()
