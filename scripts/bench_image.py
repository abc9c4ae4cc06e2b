"""usage: python scripts/bench_image.py [--image minirag:latest] [--skip-build] [--cold-runs N]

Figures for the container image, printed as a table (and JSON with --json):
image size, warm rebuild time (`make image` with the wheelhouse and base cached),
`docker run` -> `initialize` response, and over an index synced beforehand
`docker run` -> initialize / tools/list / first query_documents (sent at once; each
of --cold-runs runs and the median), RSS idle and after 100 queries (both
processes: MCP server + scheduler, from `docker stats`), and seconds from a file
landing in /docs to being searchable under the default schedule (SYNC_INTERVAL
as baked in the image, 900 s, unless --interval is given).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.docker.test_image import McpContainer, cold_start, docker_run  # noqa: E402

DOCKER = os.environ.get("DOCKER", shutil.which("docker") or "docker")
QUERIES = ["how often should solar panels be cleaned", "как долго варить пельмени", "Kaffeemaschine entkalken",
           "firmware signing key", "резервное копирование восстановление"]


def mem_mib(name: str) -> float:
    out = subprocess.run([DOCKER, "stats", "--no-stream", "--format", "{{.MemUsage}}", name],
                         capture_output=True, text=True, timeout=60).stdout.split("/")[0].strip()
    units = {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "B": 1 / 1024 / 1024}
    for unit, factor in units.items():
        if out.endswith(unit):
            return round(float(out[: -len(unit)]) * factor, 1)
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(usage=__doc__.splitlines()[0][7:])
    ap.add_argument("--image", default="minirag:latest")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--interval", type=int, default=None, help="SYNC_INTERVAL for the freshness figure")
    ap.add_argument("--cold-runs", type=int, default=3, help="cold starts over a synced index (0: none)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fig: dict[str, object] = {}

    if not args.skip_build:
        t = time.monotonic()
        subprocess.run(["make", "-s", "image", f"IMAGE={args.image}"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        fig["warm_build_s"] = round(time.monotonic() - t, 1)
    size = subprocess.run([DOCKER, "image", "inspect", "-f", "{{.Size}}", args.image], capture_output=True,
                          text=True, check=True).stdout.strip()
    fig["image_size_mb"] = round(int(size) / 1e6)

    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs"
        shutil.copytree(ROOT / "samples", docs)
        volume = f"minirag-bench-{os.getpid()}"
        if args.cold_runs:
            mounts = [f"{docs}:/docs:ro", f"{volume}-cold:/index"]
            assert docker_run(args.image, "sync", mounts=mounts).returncode == 0
            runs = [cold_start(args.image, mounts) for _ in range(args.cold_runs)]
            subprocess.run([DOCKER, "volume", "rm", "-f", f"{volume}-cold"], capture_output=True)
            for key in runs[0]:
                fig[f"cold_run_to_{key}_s"] = statistics.median(run[key] for run in runs)
                fig[f"cold_run_to_{key}_runs_s"] = [run[key] for run in runs]
            fig["cold_load_average"] = round(os.getloadavg()[0], 1)
        env = {} if args.interval is None else {"SYNC_INTERVAL": str(args.interval)}
        mcp = McpContainer(args.image, [f"{docs}:/docs:ro", f"{volume}:/index"], env)
        try:
            mcp.initialize()
            fig["run_to_initialize_s"] = round(time.monotonic() - mcp.started, 2)
            # The startup sync (empty index): wait until the sample files are searchable.
            t = time.monotonic()
            while "/docs/pelmeni.html" not in json.dumps(mcp.tool("query_documents", {"query": QUERIES[1]})):
                time.sleep(1)
            fig["startup_sync_to_searchable_s"] = round(time.monotonic() - mcp.started, 1)
            time.sleep(5)
            fig["rss_idle_mib"] = mem_mib(mcp.name)
            t = time.monotonic()
            for i in range(100):
                mcp.tool("query_documents", {"query": QUERIES[i % len(QUERIES)], "topK": 5})
            fig["query_ms_avg_over_mcp"] = round((time.monotonic() - t) * 10, 1)
            fig["rss_after_100_queries_mib"] = mem_mib(mcp.name)
            marker = "Quokka-9 turbine blade inspection interval"
            (docs / "late-arrival.md").write_text(f"# Late arrival\n\nThe {marker} is 400 hours.\n")
            t = time.monotonic()
            limit = (args.interval or 900) + 120
            while time.monotonic() - t < limit:
                hits = mcp.tool("query_documents", {"query": marker, "topK": 3})
                if "/docs/late-arrival.md" in json.dumps(hits):
                    break
                time.sleep(2)
            fig["file_landed_to_searchable_s"] = round(time.monotonic() - t, 1)
            fig["sync_interval_s"] = args.interval or 900
        finally:
            mcp.close()
            subprocess.run([DOCKER, "volume", "rm", "-f", volume], capture_output=True)
    if args.json:
        print(json.dumps(fig, indent=1))
    else:
        for key, value in fig.items():
            print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
