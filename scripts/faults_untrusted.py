#!/usr/bin/env python3
"""A hostile 16 MB HTML table through `ingest_data` and `ingest_url`, against a live `minirag serve-http`.

Usage: faults_untrusted.py [--size-mb 16] [--timeout S] [--memory-mb M] [--via data,url] [--large-mb 20] [--json]

The server is `minirag serve` over stdio (the HTTP transport caps an MCP message at 4 MB).

Both tools hand untrusted bytes to the server. They must be converted in a worker process
under CONVERT_TIMEOUT and CONVERT_MEMORY_MB (appliance/ingest/isolate.py), never in the
server: before, the table grew the server's RSS by 840 MB, ran over two minutes and pushed
query latency to 4 s. For each tool this prints the server process's RSS growth over its
warm baseline (the server alone: its conversion worker is a child process with its own
limit), the slowest of the queries sent every 0.25 s meanwhile, how long
the ingest took to end and the error it ended with (the client sends the queries on the
same session, concurrently). The page for `ingest_url` comes from a
loopback web server (ALLOW_PRIVATE_URLS=1 lets the fetcher reach it).
With --large-mb, a harmless Markdown ingest_data of that size follows, cancelled after a
minute with sync_cancel: how much the server grew while it embedded, and how fast it stopped.
Targets (issue 28): RSS within +300 MB, every query under 1.5 s, ended within
CONVERT_TIMEOUT + 30 s with an error naming the limit.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MINIRAG = str(Path(sys.executable).with_name("minirag"))
DEFAULT_TIMEOUT_S = 30
QUERY_EVERY_S = 0.25
LARGE_RUN_S = 60.0
"""How long the large ingest_data job (--large-mb) embeds before it is cancelled."""


def hostile_html(size_mb: int) -> bytes:
    """One table of `size_mb` MB: a DOM of millions of nodes for the HTML converter."""
    row = "<tr>" + "".join(f"<td>cell {n} lantern</td>" for n in range(8)) + "</tr>\n"
    rows = size_mb * (1 << 20) // len(row)
    return ("<html><head><title>Table</title></head><body><table>\n" + row * rows
            + "</table></body></html>").encode()


def rss_mb(pid: int) -> float:
    """VmRSS of that one process (not its children), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Peak(threading.Thread):
    """The highest RSS of a process, sampled every 50 ms."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self._done = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.05):
            self.peak = max(self.peak, rss_mb(self.pid))

    def stop(self) -> float:
        self._done.set()
        self.join()
        return self.peak


def serve_page(body: bytes) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/table.html"


async def _queries(client: Any, until: asyncio.Event, latencies: list[float], errors: list[str]) -> None:
    while not until.is_set():
        t0 = time.perf_counter()
        result = await client.call_tool("query_documents", {"query": "glacier ferry timetable", "topK": 3},
                                        raise_on_error=False)
        latencies.append(time.perf_counter() - t0)
        if result.is_error or not (result.structured_content or {}).get("results"):
            errors.append(json.dumps(result.structured_content)[:300])
        await asyncio.sleep(QUERY_EVERY_S)


def child_pid(name: str) -> int:
    """The pid of this process's child whose command line contains `name` (the stdio server)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and name in cmdline:
            return int(stat.parent.name)
    raise RuntimeError(f"no child process running {name!r}")


async def _ingest(client: Any, tool: str, args: dict[str, Any], pid: int, deadline_s: float) -> dict[str, Any]:
    """One hostile ingest, followed to its end, while queries go to the same server."""
    baseline = max(rss_mb(pid) for _ in range(5) if not time.sleep(0.1))
    peak = Peak(pid)
    peak.start()
    latencies: list[float] = []
    errors: list[str] = []
    until = asyncio.Event()
    asking = asyncio.create_task(_queries(client, until, latencies, errors))
    t0 = time.monotonic()
    answer = (await client.call_tool(tool, args, raise_on_error=False)).structured_content or {}
    while "jobId" in answer and answer.get("finishedAt") is None and time.monotonic() - t0 < deadline_s:
        await asyncio.sleep(0.5)
        answer = (await client.call_tool("sync_status", {"jobId": answer["jobId"]},
                                         raise_on_error=False)).structured_content or {}
    took = time.monotonic() - t0
    until.set()
    await asking
    return {"tool": tool, "seconds": round(took, 1),
            "ended": answer.get("finishedAt") is not None or "jobId" not in answer,
            "error": answer.get("error"), "phase": answer.get("phase"),
            "rss_baseline_mb": round(baseline), "rss_growth_mb": round(peak.stop() - baseline),
            "queries": len(latencies), "query_max_s": round(max(latencies, default=0.0), 3),
            "query_errors": errors[:3]}


async def _cancel_large(client: Any, content: str, pid: int, run_s: float) -> dict[str, Any]:
    """A large, harmless ingest_data job left to run `run_s` seconds, then cancelled with sync_cancel."""
    baseline = max(rss_mb(pid) for _ in range(5) if not time.sleep(0.1))
    peak = Peak(pid)
    peak.start()
    job = (await client.call_tool("ingest_data", {"source": "large-notes", "content": content})).structured_content
    await asyncio.sleep(run_s)
    t0 = time.monotonic()
    job = (await client.call_tool("sync_cancel", {"jobId": job["jobId"]})).structured_content
    while job.get("finishedAt") is None and time.monotonic() - t0 < 120:
        await asyncio.sleep(0.2)
        job = (await client.call_tool("sync_status", {"jobId": job["jobId"]})).structured_content
    return {"tool": "ingest_data+sync_cancel", "content_mb": round(len(content) / (1 << 20), 1),
            "ran_s": run_s, "cancel_to_end_s": round(time.monotonic() - t0, 1), "phase": job.get("phase"),
            "error": job.get("error"),
            "rss_baseline_mb": round(baseline), "rss_growth_mb": round(peak.stop() - baseline)}


def large_notes(size_mb: int) -> str:
    """Real Markdown (the shared corpus's two ground-truth documents), repeated to `size_mb` MB."""
    from tests.conftest import shared_path

    text = "\n\n".join((shared_path() / "corpus" / s).read_text("utf-8") for s in (
        "docling/html/groundtruth/wiki_duck.html.md", "docling/pdf/groundtruth/redp5110_sampled.md"))
    return (text * (size_mb * (1 << 20) // len(text) + 1))[:size_mb * (1 << 20)]


def run(*, size_mb: int = 16, timeout_s: int = DEFAULT_TIMEOUT_S, via: tuple[str, ...] = ("data", "url"),
        memory_mb: int | None = None, large_mb: int = 0, log: Any = sys.stderr) -> dict[str, Any]:
    """Start `minirag serve` (stdio: no HTTP message size cap on ingest_data's content), warm it,
    then send the hostile table through each tool in `via`. `memory_mb`: CONVERT_MEMORY_MB for the
    server (its default when None)."""
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    body = hostile_html(size_mb)
    httpd, page_url = serve_page(body)
    with tempfile.TemporaryDirectory(prefix="minirag-untrusted-") as tmp:
        work = Path(tmp)
        (work / "docs").mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME")}
        env |= {"BASE_DIR": str(work / "docs"), "DB_PATH": str(work / "index"), "SYNC_INTERVAL": "86400",
                "CONVERT_TIMEOUT": str(timeout_s), "MAX_FILE_SIZE": str(4 * max(len(body), large_mb << 20)),
                "ALLOW_URL_INGEST": "1", "ALLOW_PRIVATE_URLS": "1", "PYTHONUNBUFFERED": "1"}
        if memory_mb is not None:
            env["CONVERT_MEMORY_MB"] = str(memory_mb)

        async def scenario() -> list[dict[str, Any]]:
            with open(work / "serve.log", "w") as server_log:
                transport = StdioTransport(MINIRAG, ["serve"], env=env, cwd=str(work), log_file=server_log)
                async with Client(transport, timeout=600) as client:
                    pid = child_pid("serve")
                    note = "# Ferries\n\nThe glacier ferry timetable changes in May. " * 20
                    await client.call_tool("ingest_data", {"source": "ferries", "content": note})  # starts the worker
                    await client.call_tool("query_documents", {"query": "glacier ferry", "topK": 3})  # loads the model
                    out = []
                    for how in via:
                        tool, args = (("ingest_data", {"source": "hostile-table", "content": body.decode(),
                                                       "format": "html"}) if how == "data"
                                      else ("ingest_url", {"url": page_url}))
                        out.append(await _ingest(client, tool, args, pid, timeout_s + 120))
                        print(json.dumps(out[-1]), file=log, flush=True)
                    if large_mb:
                        out.append(await _cancel_large(client, large_notes(large_mb), pid, LARGE_RUN_S))
                        print(json.dumps(out[-1]), file=log, flush=True)
                    return out

        try:
            results = asyncio.run(scenario())
        except BaseException:
            print((work / "serve.log").read_text("utf-8", "replace")[-3000:], file=log)
            raise
        finally:
            httpd.shutdown()
    return {"size_mb": size_mb, "convert_timeout_s": timeout_s, "convert_memory_mb": memory_mb,
            "html_bytes": len(body), "runs": results}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=16)
    ap.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, help="CONVERT_TIMEOUT for the server")
    ap.add_argument("--memory-mb", type=int, default=None, help="CONVERT_MEMORY_MB for the server (its default)")
    ap.add_argument("--via", default="data,url", help="data, url or both")
    ap.add_argument("--large-mb", type=int, default=0,
                    help="then a harmless ingest_data of this many MB, cancelled after 60 s (issue 28: 20)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = run(size_mb=args.size_mb, timeout_s=args.timeout, via=tuple(v for v in args.via.split(",") if v),
                 memory_mb=args.memory_mb, large_mb=args.large_mb)
    if args.json:
        print(json.dumps(result))
    else:
        for r in result["runs"]:
            if "cancel_to_end_s" in r:
                print(f"{r['tool']} of {r['content_mb']} MB: cancelled after {r['ran_s']:g} s, ended "
                      f"{r['cancel_to_end_s']} s later ({r['phase']}), server RSS +{r['rss_growth_mb']} MB")
                continue
            err = (r["error"] or {}).get("code")
            print(f"{r['tool']:12} ended in {r['seconds']:6.1f} s ({err or r['phase']}), server RSS "
                  f"+{r['rss_growth_mb']} MB over {r['rss_baseline_mb']} MB, {r['queries']} queries, "
                  f"slowest {r['query_max_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
