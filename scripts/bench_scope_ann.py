#!/usr/bin/env python3
"""How often a scope that holds every chunk changes the answer on the approximate (vector index) path.

Usage: bench_scope_ann.py [--queries 300] [--json]

Copies the SciFact index that `scripts/bench_query.py` uses, gives it LanceDB's vector
index (writes.VECTOR_INDEX, as indexes past the replica's memory budget get), turns the in-memory replica off
(a memory budget of 0) and asks every query twice: unfiltered and with the documents'
folder as scope. Counts the queries whose hits (top 10) or vector candidates (top 40)
differ, and the vector candidates' recall against the exact ranking.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.assemble.passages import RANK_COLUMNS  # noqa: E402
from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402
from appliance.storage.filters import Filter  # noqa: E402
from appliance.storage.writes import VECTOR_INDEX  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    docs = (ROOT / ".cache" / "eval" / "docs" / "scifact").resolve()  # the source ids name the real path
    app = Appliance(load_settings(dict(os.environ), base_dirs=[str(docs)]))
    source = ROOT / ".cache" / "eval" / "index" / f"scifact-{app.spec.id.replace('/', '__')}-{app.resources.budget}"
    if not source.exists():
        sys.exit(f"{source} is missing: run scripts/bench_query.py first")
    shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
    texts = [json.loads(line)["text"] for line in (shared / "eval/retrieval/scifact/queries.jsonl").open()]
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(source, Path(tmp) / "index")
        app = Appliance(replace(app.settings, db_path=Path(tmp) / "index"))
        exact = {}
        for text in texts[:args.queries]:
            vector = app.resources.embedder.embed_query(text)
            exact[text] = [r["id"] for r in app.index.reader.vector_search(vector, 40, None, ["id"])]
        app.index.chunks().create_index("vector", config=VECTOR_INDEX)
        app.index.memory_budget = 0
        scope = Filter(str(docs))
        hits_differ = candidates_differ = found = 0
        for text in texts[:args.queries]:
            vector = app.resources.embedder.embed_query(text)
            whole = app.index.reader.vector_search(vector, 40, None, RANK_COLUMNS)
            scoped = app.index.reader.vector_search(vector, 40, scope, RANK_COLUMNS)
            candidates_differ += [r["id"] for r in whole] != [r["id"] for r in scoped]
            found += len({r["id"] for r in whole} & set(exact[text]))
            answer = [(h["source"], h["chunkIndex"], h["score"]) for h in app.search(text).results]
            hits_differ += answer != [(h["source"], h["chunkIndex"], h["score"])
                                      for h in app.search(text, scope=str(docs)).results]
        out = {"chunks": app.index.registry.count_chunks(), "queries": args.queries, "hits_differ": hits_differ,
               "candidates_differ": candidates_differ, "ann_recall_at_40": round(found / (40 * args.queries), 4)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['queries']} queries over {out['chunks']} chunks through the vector index: scope holding "
              f"everything changed the hits of {hits_differ} and the vector candidates of {candidates_differ}; "
              f"its recall@40 against the exact ranking {out['ann_recall_at_40']}")


if __name__ == "__main__":
    main()
