#!/usr/bin/env python3
"""What a scope costs LanceDB's searches, by how its rows lie in the table: over an index that
`scripts/bench_scale.py --work DIR --keep` built and kept.

Usage: bench_scope_layout.py DIR/index-SIZE [--queries 100] [--rounds 2] [--json]

A prefiltered search looks each row it meets up in the scope's row mask (the vector search: every row of every
partition it probes). The benchmark's
sources go to its folders in turn (source n to folder n mod 10), so a folder's rows are spread over the
whole table, one source in ten; a sync writes a folder's files one after another (in path order), so there a
folder's rows lie together until later edits scatter them. Each query's vector search (the reader's probes,
PROBED_SHARE, and depth, 150 + TIE_MARGIN) and BM25 search (its terms as a query gives them), each reading its
distances or scores alone, three ways: unfiltered, scoped to the first folder (spread), and scoped to as many
rows written together (the first tenth of every folder's sources by number, which the build wrote one after
another). Prints each one's CPU and wall time a search.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import lancedb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale

from appliance.search.keywords import query_terms
from appliance.storage.filters import Filter
from appliance.storage.reads import PROBED_SHARE, TIE_MARGIN, counted_partitions, estimated_partitions
from appliance.storage.tables import FTS_COLUMN, filter_sql, sql_str, vector_index


def scopes(docs: Path, sources: int) -> dict[str, str | None]:
    """Filters of about a tenth of the rows each: the first folder (spread) and a run of sources (together)."""
    share = sources // bench_scale.FOLDERS // bench_scale.FOLDERS  # a tenth of each folder's sources
    together = " OR ".join(
        f"(source_id >= {sql_str(str(docs / f'f{f}' / 'd0000000.md'))} AND "
        f"source_id < {sql_str(str(docs / f'f{f}' / f'd{share * bench_scale.FOLDERS:07d}.md'))})"
        for f in range(bench_scale.FOLDERS))
    return {"unfiltered": None, "spread": filter_sql(Filter(bench_scale.scoped_folder(docs))), "together": together}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="DIR/index-SIZE, as bench_scale.py --keep left it")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    chunks = lancedb.connect(str(args.dir / "index")).open_table("chunks")
    index = vector_index(chunks)
    if index is None:
        sys.exit("the index has no vector index: build it with bench_scale.py at 100,000 chunks or more")
    probes = max(1, math.ceil(PROBED_SHARE * (counted_partitions(chunks, index) or estimated_partitions(index))))
    vectors = np.load(args.dir / "queries.npy")[:args.queries]
    texts = json.loads((args.dir / "queries.json").read_text(encoding="utf-8"))["texts"][:args.queries]
    sources = lancedb.connect(str(args.dir / "index")).open_table("sources").count_rows()
    filters = scopes(args.dir / "docs", sources)
    rows = {name: chunks.count_rows(where) if where else chunks.count_rows() for name, where in filters.items()}

    def search(kind: str, where: str | None) -> tuple[float, float]:
        c0, w0 = bench_scale.cpu_ms(), time.perf_counter()
        for vector, text in zip(vectors, texts, strict=True):
            if kind == "vector":
                query = chunks.search(vector).distance_type("cosine").refine_factor(1) \
                    .minimum_nprobes(probes).maximum_nprobes(probes)
            else:
                query = chunks.search(query_terms(text), query_type="fts", fts_columns=FTS_COLUMN)
            if where is not None:
                query = query.where(where, prefilter=True)
            key = "_distance" if kind == "vector" else "_score"
            query.limit(150 + TIE_MARGIN).select([key]).with_row_id(False).to_arrow()
        return (bench_scale.cpu_ms() - c0) / len(vectors), (time.perf_counter() - w0) * 1000 / len(vectors)

    kinds = ("vector", "bm25")
    for kind in kinds:
        search(kind, None)  # the indexes' caches
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {(k, n): [] for k in kinds for n in filters}
    for _ in range(args.rounds):
        for kind, name in runs:
            runs[kind, name].append(search(kind, filters[name]))
    out: dict[str, object] = {
        f"{kind}_{name}": {"rows": rows[name], "cpu_ms": [round(c, 1) for c, _ in r],
                           "wall_ms": [round(w, 1) for _, w in r]} for (kind, name), r in runs.items()}
    out["probes"] = probes
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{args.queries} queries, {probes} partitions probed, {args.rounds} rounds")
    for kind, name in runs:
        item = out[f"{kind}_{name}"]
        assert isinstance(item, dict)
        print(f"  {kind:6} {name:10} {item['rows']:>9,} rows: CPU {' / '.join(map(str, item['cpu_ms']))} ms, "
              f"wall {' / '.join(map(str, item['wall_ms']))} ms a search")


if __name__ == "__main__":
    main()
