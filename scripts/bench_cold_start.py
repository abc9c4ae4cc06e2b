#!/usr/bin/env python3
"""What a cold MCP server spends its first seconds on, stage by stage, in one fresh process.

Usage: bench_cold_start.py [--docs DIR] [--json]

Stages, in the order `minirag serve` meets them on stdio: the CLI, the service
(LanceDB), fastembed, the model (tokenizer and ONNX session), the first search
(what the stdio front answers a first query_documents with), then fastmcp and the
tool declarations (imported once the warm-up is done).
Without --docs it indexes samples/ into a throwaway DB_PATH first (in a child
process, so this one starts cold).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def stages(docs: str, db: str) -> dict[str, float]:
    started = time.perf_counter()
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks[name] = round(time.perf_counter() - started, 3)

    import appliance.cli  # noqa: F401
    mark("cli")
    from appliance.config import load_settings, read_environment
    from appliance.service import Appliance

    app = Appliance(load_settings(base_dirs=[docs], db_path=db))
    mark("service")
    from appliance.embed import import_fastembed

    import_fastembed()
    mark("fastembed")
    app.embedder.load()
    mark("model")
    app.search("warm up", top_k=1)
    mark("firstSearch")
    from appliance.server import Runtime, create_server

    create_server(Runtime(read_environment(), {"base_dirs": [docs], "db_path": db}))
    mark("fastmcpAndTools")
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default=str(ROOT / "samples"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(stages(args.docs, args.child)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        minirag = str(Path(sys.executable).with_name("minirag"))
        subprocess.run([minirag, "sync", "--base-dir", args.docs, "--db-path", tmp, "--json"], check=True,
                       stdout=subprocess.DEVNULL)
        child = subprocess.run([sys.executable, __file__, "--docs", args.docs, "--child", tmp], check=True,
                               capture_output=True, text=True)
    marks = json.loads(child.stdout.strip().splitlines()[-1])
    out = {"cumulativeSeconds": marks, "loadAverage": round(os.getloadavg()[0], 1), "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    previous = 0.0
    for name, at in marks.items():
        print(f"{name:16} +{at - previous:5.2f} s  (at {at:5.2f} s)")
        previous = at
    print(f"load average {out['loadAverage']} on {out['cpus']} CPUs")


if __name__ == "__main__":
    main()
