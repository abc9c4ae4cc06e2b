#!/usr/bin/env python
"""Usage: scripts/bench_mcp.py [--json] [--docs DIR] [--queries N] [--runs N]

Times `minirag serve` the way an MCP client sees it, over stdio with raw JSON-RPC:
process start -> initialize response, -> tools/list, -> first query_documents
result (cold: sent right after tools/list, while the warm-up loads the model), in
--runs fresh processes (each figure: every run and the median), then warm
query_documents p50/p95 in the last one, against the same queries through the
service layer in-process. Without --docs it indexes a small generated corpus into
a throwaway DB_PATH first. The start-up budget (docker run included, idle machine):
initialize <= 1.5 s, first query <= 4 s; scripts/bench_image.py measures it in the image.
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
from typing import Any

MINIRAG = str(Path(sys.executable).with_name("minirag"))
QUERIES = ["ERR_ZORBLATT_7741", "how long to cool the flux controller", "vacation days carry over",
           "морозы зимой", "pancake ingredients", "uplink cable unplugged", "paid leave per year",
           "calibration restart from the service menu"]
TOPICS = {
    "errors.md": "# Error catalogue\n\n## Flux controller\n\nERR_ZORBLATT_7741 means the flux controller overheated. "
                 "Let it cool for ten minutes, then restart calibration from the service menu.\n\n"
                 "## Network\n\nERR_NET_12 means the uplink cable is unplugged.\n",
    "vacation.md": "# Vacation policy\n\nTwenty-eight days of paid vacation per year; unused days carry over "
                   "until the end of March.\n",
    "pogoda.md": "# Погода\n\nЗимой в Новосибирске морозы достигают минус сорока градусов.\n",
    "recipe.txt": "Pancakes: flour, milk, two eggs, a pinch of salt. Fry on a hot pan.\n",
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Stdio:
    def __init__(self, env: dict[str, str]) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([MINIRAG, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)
        self.ids = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}) + "\n")
        self.proc.stdin.flush()
        while True:
            frame = json.loads(self.proc.stdout.readline())
            if frame.get("id") == self.ids:
                if "error" in frame or frame["result"].get("isError"):
                    raise SystemExit(f"{method} failed: {json.dumps(frame)[:400]}")
                return frame["result"]

    def notify(self, method: str) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.proc.stdin.flush()

    def since_start(self) -> float:
        return time.perf_counter() - self.started

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(30)


def query(server: Stdio, text: str) -> float:
    started = time.perf_counter()
    server.request("tools/call", {"name": "query_documents", "arguments": {"query": text, "topK": 10}})
    return time.perf_counter() - started


def cold_start(env: dict[str, str]) -> tuple[Stdio, dict[str, float]]:
    """A fresh server: seconds from process start to each of the first three answers."""
    server = Stdio(env)
    server.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "bench", "version": "0"}})
    initialize_s = server.since_start()
    server.notify("notifications/initialized")
    server.request("tools/list", {})
    tools_list_s = server.since_start()
    query(server, QUERIES[0])
    return server, {"initializeSeconds": round(initialize_s, 3), "toolsListSeconds": round(tools_list_s, 3),
                    "firstQuerySeconds": round(server.since_start(), 3)}


def bench(env: dict[str, str], rounds: int, runs: int) -> dict[str, Any]:
    cold = []
    for run in range(runs):
        server, figures = cold_start(env)
        cold.append(figures)
        if run < runs - 1:
            server.close()  # the last one stays up for the warm queries
    stdio = [query(server, QUERIES[i % len(QUERIES)]) for i in range(rounds)]
    server.close()

    from appliance.config import load_settings
    from appliance.service import Appliance

    app = Appliance(load_settings(env))
    app.search(QUERIES[0])
    local = []
    for i in range(rounds):
        started = time.perf_counter()
        app.search(QUERIES[i % len(QUERIES)], top_k=10)
        local.append(time.perf_counter() - started)
    ms = lambda s: round(s * 1000, 1)  # noqa: E731
    return {
        **{key: round(statistics.median(run[key] for run in cold), 3) for key in cold[0]},
        "coldRuns": cold, "rounds": rounds,
        "stdioQueryMs": {"p50": ms(statistics.median(stdio)), "p95": ms(percentile(stdio, 0.95))},
        "inProcessQueryMs": {"p50": ms(statistics.median(local)), "p95": ms(percentile(local, 0.95))},
        "loadAverage": os.getloadavg()[0], "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--docs", help="an existing folder to index and query (default: a generated sample)")
    parser.add_argument("--queries", type=int, default=40, help="warm queries per side (default 40)")
    parser.add_argument("--runs", type=int, default=1, help="cold server starts to time (default 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(args.docs or Path(tmp) / "docs").resolve()
        if not args.docs:
            docs.mkdir()
            for name, text in TOPICS.items():
                for n in range(5):
                    (docs / f"{n}-{name}").write_text(text, "utf-8")
        env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME")}
        env |= {"BASE_DIR": str(docs), "DB_PATH": str(Path(tmp) / "db")}
        subprocess.run([MINIRAG, "sync", "--json"], env=env, check=True, stdout=subprocess.DEVNULL)
        figures = bench(env, args.queries, max(1, args.runs))
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    cold = figures["coldRuns"]
    for key, label in (("initializeSeconds", "initialize"), ("toolsListSeconds", "tools/list"),
                       ("firstQuerySeconds", "first query")):
        runs = ", ".join(f"{run[key]:.2f}" for run in cold)
        median = f" (median; runs {runs})" if len(cold) > 1 else ""
        print(f"{label:15} {figures[key]:.3f} s from process start{median}")
    for side in ("stdioQueryMs", "inProcessQueryMs"):
        print(f"{side:15} p50 {figures[side]['p50']} ms, p95 {figures[side]['p95']} ms over {args.queries} queries")
    print(f"load average    {figures['loadAverage']:.1f} on {figures['cpus']} CPUs")


if __name__ == "__main__":
    main()
