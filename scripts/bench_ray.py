#!/usr/bin/env python3
"""`sync --ray` throughput next to a local sync, the writer's commit rate alone, and the projection.

Usage: bench_ray.py [--files 60] [--writes 3] [--writer-chunks 20000] [--json]

The documents are the first FILES text-like files (md, txt, html, json, csv) of ../shared/corpus
(MINIRAG_SHARED) above 2 kB, copied to a temporary folder. Each sync starts from an empty index:
a local sync (the appliance's own pipeline: one converter process, the model on every core), then
`sync --ray` on a local Ray cluster of 1 and of 2 worker processes (`ray.init(num_cpus=N)`, one
CPU and one model thread per task). Sync time is `report.seconds` (inside the sync lock: scan,
convert, cut, embed, commit); the cluster's start and the node checks are reported apart.

The writer's commit rate: the rows the Ray sync produced (vectors included) committed again,
by the driver's own `indexing.write_works`, into an empty index in batches of WRITE_CHUNKS; no model runs.
It is the ceiling of any cluster: one writer commits every chunk.

CPU time is counted too (the bench process with its converter; the Ray workers with theirs, read
from /proc before the cluster stops), since on a shared machine the wall time mostly measures the
neighbours. Projection for C chunks on n nodes of k cores, r chunks per CPU-second (the 1-worker
Ray figure) and
W chunks/s for the writer:  T(n) = C / min(n * k * r, W)  (plus the cluster's start).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402

EXTENSIONS = (".md", ".txt", ".html", ".json", ".csv")


def _corpus(count: int, into: Path) -> list[Path]:
    shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared")) / "corpus"
    picked = [p for p in sorted(shared.rglob("*")) if p.suffix in EXTENSIONS and 2_000 < p.stat().st_size < 200_000]
    picked = picked[:count]
    for path in picked:
        target = into / path.relative_to(shared)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return picked


def _proc_cpu(pid: int) -> float:
    """utime + stime of one process, in seconds (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ray_workers_cpu() -> float:
    """CPU seconds of the Ray worker processes (`ray::...`) and their children (the converter processes)."""
    parents: dict[int, int] = {}
    workers: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat[1])
        if cmdline.startswith(b"ray::"):
            workers.add(int(entry.name))
    return sum(_proc_cpu(pid) for pid, parent in parents.items() if pid in workers or parent in workers)


def _own_cpu() -> float:
    import resource

    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _app(docs: Path, index: Path) -> Appliance:
    return Appliance(load_settings({}, base_dirs=[str(docs)], db_path=str(index)))


def _local(docs: Path, index: Path) -> dict[str, Any]:
    cpu = _own_cpu()
    report = _app(docs, index).sync()
    cpu = _own_cpu() - cpu  # this process and its converter (reaped when the sync closes its pool)
    assert not report.failed, report.failed
    return {"chunks": report.chunks, "seconds": round(report.seconds, 2),
            "chunksPerSecond": round(report.chunks / report.seconds, 2), "cpuSeconds": round(cpu, 1),
            "chunksPerCpuSecond": round(report.chunks / cpu, 2)}


def _ray(docs: Path, index: Path, workers: int) -> dict[str, Any]:
    import ray

    from appliance.cluster.driver import sync_on_ray

    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="lancedb fork support")
        ray.init(address="local", num_cpus=workers, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        up = time.perf_counter() - started
        indexers: list[Any] = []
        driver_cpu = _own_cpu()
        report = sync_on_ray(_app(docs, index).resources, "local", indexer_out=indexers)
        total = time.perf_counter() - started
        cpu = _ray_workers_cpu() + _own_cpu() - driver_cpu  # the workers (model loads included) and the driver
    finally:
        ray.shutdown()
    assert not report.failed, report.failed
    writer = indexers[0]
    return {"workers": workers, "chunks": report.chunks, "seconds": round(report.seconds, 2),
            "chunksPerSecond": round(report.chunks / report.seconds, 2), "clusterStartSeconds": round(up, 2),
            "totalSeconds": round(total, 2), "commits": writer.writes, "cpuSeconds": round(cpu, 1),
            "chunksPerCpuSecond": round(report.chunks / cpu, 2),
            "commitSeconds": round(writer.write_seconds, 2)}


def _writer(source_index: Path, docs: Path, into: Path, batch: int, repeats: int, min_chunks: int) -> dict[str, Any]:
    """Commit the rows of `source_index` again (copied up to `min_chunks`) into fresh indexes, `batch` per commit."""
    from appliance.results import Tally
    from appliance.storage.tables import chunk_schema
    from appliance.sync import indexing
    from appliance.sync.pipeline import Work

    source = _app(docs, source_index)
    columns = chunk_schema(source.spec.dim).names
    by_source: dict[str, list[dict[str, Any]]] = {}
    for row in source.index.reader.chunk_rows("source_id IS NOT NULL", columns):
        by_source.setdefault(row["source_id"], []).append(row)
    originals = [(s, by_source.get(s.source_id, [])) for s in source.index.registry.source_rows()]
    chunks = max(1, sum(len(rows) for _s, rows in originals))
    works = []  # copies under other source ids, so the measurement spans many commits
    for copy in range(max(1, -(-min_chunks // chunks))):
        for s, rows in originals:
            sid = f"{s.source_id}#copy{copy}"
            works.append(Work([replace(s, source_id=sid)], [
                {**row, "id": f"{row['id']}#{copy}", "source_id": sid, "parent_id": f"{row['parent_id']}#{copy}"}
                for row in rows]))
    rates = []
    for n in range(repeats):
        target = _app(docs, into / f"w{n}")
        report = Tally()
        started = time.perf_counter()
        pending: list[Work] = []
        for work in works:
            pending.append(work)
            if sum(len(w.rows) for w in pending) >= batch:
                indexing.write_works(target.resources, pending, report)
                pending = []
        if pending:
            indexing.write_works(target.resources, pending, report)
        rates.append(report.chunks / (time.perf_counter() - started))
    return {"chunks": sum(len(w.rows) for w in works), "batchChunks": batch, "commits": -(-report.chunks // batch),
            "chunksPerSecond": round(sorted(rates)[len(rates) // 2], 1), "runs": [round(r, 1) for r in rates]}


def _projection(per_core: float, writer: float, chunks: int = 1_000_000, cores: int = 8) -> list[dict[str, Any]]:
    rows = []
    for nodes in (1, 10, 50):
        rate = min(nodes * cores * per_core, writer)
        rows.append({"nodes": nodes, "cores": nodes * cores, "chunksPerSecond": round(rate, 1),
                     "hours": round(chunks / rate / 3600, 2), "boundBy": "writer" if rate == writer else "embedding"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--writes", type=int, default=3, help="repeats of the writer-alone measurement")
    parser.add_argument("--writer-chunks", type=int, default=20_000, help="chunks the writer-alone run commits")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from appliance.cluster.driver import WRITE_CHUNKS

    work = Path(tempfile.mkdtemp(prefix="minirag-bench-ray-"))
    try:
        docs = work / "docs"
        files = _corpus(args.files, docs)
        out: dict[str, Any] = {"files": len(files), "cpus": os.cpu_count(), "loadBefore": os.getloadavg()[0]}
        out["local"] = _local(docs, work / "local")
        out["ray1"] = _ray(docs, work / "ray1", 1)
        out["ray2"] = _ray(docs, work / "ray2", 2)
        out["writer"] = _writer(work / "ray2", docs, work / "writer", WRITE_CHUNKS, args.writes, args.writer_chunks)
        out["loadAfter"] = os.getloadavg()[0]
        per_core = out["ray1"]["chunksPerCpuSecond"]  # a busy shared box stretches wall time, not CPU time
        out["projection"] = {"formula": "T = C / min(n * k * r, W)", "C": 1_000_000, "k": 8, "r": per_core,
                             "W": out["writer"]["chunksPerSecond"],
                             "rows": _projection(per_core, out["writer"]["chunksPerSecond"])}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['files']} files, {out['local']['chunks']} chunks, {out['cpus']} CPUs "
          f"(load {out['loadBefore']:.1f} before, {out['loadAfter']:.1f} after)")
    print(f"local sync          {out['local']['seconds']:7.1f} s  {out['local']['chunksPerSecond']:6.1f} chunks/s  "
          f"{out['local']['chunksPerCpuSecond']:5.2f} chunks per CPU-second")
    for key in ("ray1", "ray2"):
        r = out[key]
        print(f"ray, {r['workers']} worker(s)    {r['seconds']:7.1f} s  {r['chunksPerSecond']:6.1f} chunks/s  "
              f"{r['chunksPerCpuSecond']:5.2f} chunks per CPU-second  (+{r['clusterStartSeconds']:.1f} s cluster "
              f"start; {r['commits']} commits, {r['commitSeconds']:.1f} s)")
    w = out["writer"]
    print(f"writer alone        {w['chunksPerSecond']:7.1f} chunks/s committed ({w['chunks']} chunks, "
          f"{w['batchChunks']} per commit, runs {w['runs']})")
    p = out["projection"]
    print(f"1M chunks: {p['formula']}, k={p['k']}, r={p['r']}, W={p['W']}")
    for row in p["rows"]:
        print(f"  {row['nodes']:3d} nodes ({row['cores']:4d} cores): {row['chunksPerSecond']:8.1f} chunks/s "
              f"-> {row['hours']:7.2f} h ({row['boundBy']})")


if __name__ == "__main__":
    main()
