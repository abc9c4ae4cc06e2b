#!/usr/bin/env python3
"""What a cold MCP server spends its first seconds on, stage by stage, in one fresh process.

Usage: bench_cold_start.py [--docs DIR] [--runs N] [--json]

Stages, in the order `minirag serve` meets them on stdio: the CLI, fastmcp and the
tool declarations (then the server loop starts and answers `initialize`), and the
warm-up thread's work: the service with LanceDB, fastembed, the model (tokenizer and
ONNX session), the first search (opens the index). Each stage shows wall and CPU
seconds (CPU is steadier on a loaded machine). `importedAfterTools` lists which of
lancedb, fastembed and markitdown were loaded once the tools were declared (none
should be). Without --docs it indexes samples/ into a throwaway DB_PATH first (in a
child process, so each measured process starts cold).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("lancedb", "fastembed", "markitdown")


def stages(docs: str, db: str) -> dict[str, object]:
    started, cpu0 = time.perf_counter(), time.process_time()
    marks: dict[str, dict[str, float]] = {}

    def mark(name: str) -> None:
        marks[name] = {"wall": round(time.perf_counter() - started, 3), "cpu": round(time.process_time() - cpu0, 3)}

    import appliance.adapters.cli  # noqa: F401
    mark("cli")
    from appliance.adapters.mcp_server import Runtime, create_server
    from appliance.config import read_environment

    runtime = Runtime(read_environment(), {"base_dirs": [docs], "db_path": db})
    create_server(runtime)
    mark("fastmcpAndTools")
    imported = [name for name in HEAVY if name in sys.modules]
    app = runtime.appliance()
    mark("service")
    from appliance.embed import import_fastembed

    import_fastembed()
    mark("fastembed")
    app.resources.embedder.load()
    mark("model")
    app.search("warm up", top_k=1)
    mark("firstSearch")
    return {"marks": marks, "importedAfterTools": imported}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default=str(ROOT / "samples"))
    parser.add_argument("--runs", type=int, default=1, help="fresh processes to measure (medians are shown)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(stages(args.docs, args.child)))
        return
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        minirag = str(Path(sys.executable).with_name("minirag"))
        subprocess.run([minirag, "sync", "--base-dir", args.docs, "--db-path", tmp, "--json"], check=True,
                       stdout=subprocess.DEVNULL)
        for _ in range(args.runs):
            child = subprocess.run([sys.executable, __file__, "--docs", args.docs, "--child", tmp], check=True,
                                   capture_output=True, text=True)
            runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
    names = list(runs[0]["marks"])
    median = {name: {kind: round(statistics.median(r["marks"][name][kind] for r in runs), 3)
                     for kind in ("wall", "cpu")} for name in names}
    out = {"cumulativeSeconds": median, "runs": len(runs),
           "importedAfterTools": sorted({m for r in runs for m in r["importedAfterTools"]}),
           "loadAverage": round(os.getloadavg()[0], 1), "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    previous = {"wall": 0.0, "cpu": 0.0}
    for name, at in median.items():
        print(f"{name:16} +{at['wall'] - previous['wall']:5.2f} s wall, +{at['cpu'] - previous['cpu']:5.2f} s CPU"
              f"  (at {at['wall']:5.2f} s)")
        previous = at
    late = ', '.join(out['importedAfterTools']) or 'none of ' + ', '.join(HEAVY)
    print(f"imported once the tools were declared: {late}")
    print(f"median of {len(runs)} run(s); load average {out['loadAverage']} on {out['cpus']} CPUs")


if __name__ == "__main__":
    main()
