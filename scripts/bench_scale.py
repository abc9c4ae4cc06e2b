#!/usr/bin/env python3
"""Growth: query latency, recall, memory, disk and sync cost of indexes of 10k, 100k and 1M chunks.

Usage: bench_scale.py [--sizes 10000,100000,1000000] [--queries 200] [--sync-files 100000]
                      [--plot PATH] [--work DIR] [--keep | --reuse] [--json]
       bench_scale.py --flat 20000 [--profile PATH] [--json]
       bench_scale.py --from-json RUN.json [RUN.json ...] [--plot PATH]   (table and plot of earlier runs)

Per size, an index is built through the store's own write path (`IndexWriter.replace_sources`
in batches, then `IndexWriter.refresh_indexes`, as a sync does). Its text is real: windows of
consecutive sentences of the shared SciFact and Cranfield documents, so BM25 sees real
term statistics. Its vectors are synthetic but shaped like the model's: a sample of real
passages is embedded once with the real model (cached under .cache/bench_scale), and
every chunk's vector is a mix of two of those plus noise, normalised; running the model
over a million chunks would take half a day here.

A fresh process (on jemalloc where it is installed, as in the image) then opens the index and
serves warm queries (SciFact and Cranfield queries) through `Appliance.search`, hybrid as
configured, unscoped and scoped to one folder of ten, the scoped ones again with their vector side
prefiltered by LanceDB (no address book: reads._postfiltered), the three taking turns query by query; times the
BM25 side alone; measures recall@10 of the vector side against an exact scan of every vector (kept by
this process while it builds); and reports its RSS and the CPU a query took (every thread's, user and
system: on a machine of few cores latency follows it and the load), and how quiet the machine was while
the queries ran (the shares of its CPU time the host stole and other processes took).

The no-change sync is measured on a second index built by the real sync over as many
small files as the size (at most `--sync-files`), with vectors from the text's hash (the
real tokenizer cuts the chunks, the model is not run): the time of a second `sync` in a
new Appliance, and of `minirag sync` as a new process.

`--work DIR --keep` keeps the built indexes; a later run with `--work DIR --reuse` serves them again
without building (its build and disk figures are the first run's), to compare query paths back to back.

`--flat N` syncs N short documents with the same synthetic embedder and reports files/s
per tenth of the run (from the first write on); `--profile PATH` writes a cProfile of it.
`SYNC_ROUND_FILES` in the environment sets the rounds of these syncs (0: everything in one process).
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.assemble.passages import RANK_COLUMNS  # noqa: E402
from appliance.config import DEFAULT_MODEL, load_settings, replica_budget  # noqa: E402
from appliance.embed import OnnxEmbedder, load_spec  # noqa: E402
from appliance.ingest.chunk import SCHEME_VERSION  # noqa: E402
from appliance.platform import native_memory  # noqa: E402
from appliance.search.keywords import analyze, query_terms  # noqa: E402
from appliance.storage.index import Index  # noqa: E402
from appliance.storage.tables import Identity, SourceRow  # noqa: E402

CACHE = ROOT / ".cache" / "bench_scale"
SAMPLE = 512
"""Real passages embedded by the model: the synthetic vectors are mixes of these."""
NOISE = 0.5
"""Length of the Gaussian noise added to each mix of two real vectors, before normalising."""
BUILD_BATCH = 5000
"""Chunks per `replace_sources` write while building."""
FOLDERS = 10
"""The sources are spread over this many folders; the scoped queries ask for the first."""
BYTES_PER_CHUNK = 32000
"""Disk an index takes per chunk, with room: 7.3 kB measured at 100k, 29.3 kB at 1M (text, keywords, vector,
indexes, and what compaction and the vector index's rebuilds replaced, which LanceDB keeps for a week)."""
BYTES_PER_FILE = 20000
"""Disk a small file of the sync benchmark takes, with its chunk rows."""
BUDGET = 256


def shared_path() -> Path:
    return Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))


def models_dir() -> Path:
    return Path(os.environ.get("MODELS_DIR", ROOT / "models" / "baked"))


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_ms() -> float:
    """This process's CPU time so far, every thread's, user and system. On a machine of few cores a warm query is
    bound by it: its latency moves with the machine's load, its CPU much less (docs/BENCHMARKS.md, Growth)."""
    times = os.times()
    return 1000 * (times.user + times.system)


def machine_ticks() -> tuple[int, int, int]:
    """The machine's CPU ticks so far (/proc/stat, every CPU): all of them, the busy ones (user, nice, system,
    interrupts) and those stolen by the host's other guests; zeros where there is no /proc/stat."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0, 0, 0
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return sum(fields), user + nice + system + irq + softirq, steal


def quiet(ticks: tuple[int, int, int], own_ms: float) -> dict[str, float]:
    """How quiet the machine was since `ticks` (machine_ticks) while this process spent `own_ms` of CPU: the
    shares of its CPU time the host stole and other processes took. A latency is compared with a target only
    on a quiet machine: on two cores, what others take comes off a query's tail."""
    now = machine_ticks()
    total, busy, steal = (b - a for a, b in zip(ticks, now, strict=True))
    if total <= 0:
        return {}
    own = own_ms / 1000 * os.sysconf("SC_CLK_TCK")
    return {"steal_pct": round(100 * steal / total, 1), "others_pct": round(100 * max(0.0, busy - own) / total, 1)}


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ---- real text -----------------------------------------------------------------------------
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")


class Corpus:
    """Sentences of the shared SciFact and Cranfield documents, each with its analysed terms."""

    def __init__(self, shared: Path) -> None:
        self.docs: list[tuple[str, list[str], list[str]]] = []  # title, sentences, their keyword strings
        for name in ("scifact", "cranfield"):
            with (shared / "eval" / "retrieval" / name / "corpus.jsonl").open(encoding="utf-8") as fh:
                for line in fh:
                    doc = json.loads(line)
                    sentences = [s.strip() for s in _SENTENCE.split(doc["text"].strip()) if len(s.strip()) > 20]
                    if len(sentences) >= 3:
                        self.docs.append((doc.get("title", "").strip(), sentences,
                                          [" ".join(analyze(s)) for s in sentences]))

    def passage(self, rng: np.random.Generator, sentences: int) -> tuple[str, str, str]:
        """(title, text, keywords) of a window of consecutive sentences of one document."""
        title, texts, keys = self.docs[int(rng.integers(len(self.docs)))]
        count = min(sentences, len(texts))
        start = int(rng.integers(len(texts) - count + 1))
        return (title, " ".join(texts[start:start + count]),
                " ".join(" ".join(analyze(title)).split() + " ".join(keys[start:start + count]).split()))


def queries(shared: Path, count: int) -> list[str]:
    out: list[str] = []
    for name in ("scifact", "cranfield"):
        with (shared / "eval" / "retrieval" / name / "queries.jsonl").open(encoding="utf-8") as fh:
            out += [json.loads(line)["text"] for line in fh]
    rng = np.random.default_rng(7)
    return [out[i] for i in rng.permutation(len(out))[:count]]


def real_vectors(corpus: Corpus, texts: list[str], log: Any) -> tuple[np.ndarray, np.ndarray]:
    """(SAMPLE real passage vectors, one real vector per query), cached by model and texts."""
    spec = load_spec(DEFAULT_MODEL, models_dir())
    digest = hashlib.sha256(json.dumps([spec.id, SAMPLE, texts]).encode()).hexdigest()[:16]
    path = CACHE / f"vectors-{digest}.npz"
    if path.exists():
        data = np.load(path)
        return data["sample"], data["queries"]
    log(f"embedding {SAMPLE} sample passages and {len(texts)} queries with {spec.id} (cached in {path})")
    embedder = OnnxEmbedder(spec, models_dir())
    rng = np.random.default_rng(11)
    sample = embedder.embed_passages([corpus.passage(rng, 6)[1] for _ in range(SAMPLE)])
    query_vectors = np.stack([embedder.embed_query(t) for t in texts])  # one at a time, as search embeds
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, sample=sample, queries=query_vectors)
    return sample, query_vectors


def synthetic(sample: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` unit vectors, each a real vector plus half another plus noise."""
    a = sample[rng.integers(len(sample), size=count)]
    b = sample[rng.integers(len(sample), size=count)]
    noise = rng.standard_normal((count, sample.shape[1])).astype(np.float32) * (NOISE / np.sqrt(sample.shape[1]))
    mixed = a + 0.5 * b + noise
    return (mixed / np.linalg.norm(mixed, axis=1, keepdims=True)).astype(np.float32)


class TopK:
    """The exact `k` nearest ids of each query, kept while vectors stream past."""

    def __init__(self, query_vectors: np.ndarray, k: int = 10) -> None:
        self.q = query_vectors / np.linalg.norm(query_vectors, axis=1, keepdims=True)
        self.k = k
        self.sims = np.full((len(self.q), 0), -np.inf, dtype=np.float32)
        self.ids = np.empty((len(self.q), 0), dtype=object)

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        sims = np.concatenate([self.sims, self.q @ vectors.T], axis=1)
        every = np.concatenate([self.ids, np.broadcast_to(np.asarray(ids, dtype=object), (len(self.q), len(ids)))],
                               axis=1)
        top = np.argsort(-sims, axis=1)[:, :self.k]
        self.sims = np.take_along_axis(sims, top, axis=1)
        self.ids = np.take_along_axis(every, top, axis=1)


# ---- building an index through the store -----------------------------------------------------
def build_index(size: int, index_path: Path, docs: Path, corpus: Corpus, sample: np.ndarray, exact: TopK,
                log: Any) -> dict[str, Any]:
    """Write `size` chunks through IndexWriter.replace_sources, then refresh_indexes; returns timings."""
    spec = load_spec(DEFAULT_MODEL, models_dir())
    index = Index(index_path, spec.dim, memory_budget=replica_budget())
    index.write_identity(Identity(model_id=spec.id, dim=spec.dim, scheme=SCHEME_VERSION, budget=BUDGET))
    rng = np.random.default_rng(size)
    for f in range(FOLDERS):
        (docs / f"f{f}").mkdir(parents=True, exist_ok=True)
    written = source_no = 0
    write_s = 0.0
    started = time.perf_counter()
    while written < size:
        sources: list[SourceRow] = []
        rows: list[dict[str, Any]] = []
        while len(rows) < BUILD_BATCH and written + len(rows) < size:
            count = min(int(rng.integers(1, 20)), size - written - len(rows))
            sid = str(docs / f"f{source_no % FOLDERS}" / f"d{source_no:07d}.md")
            key = hashlib.sha256(sid.encode()).hexdigest()[:16]
            now = time.time()
            title = ""
            for n in range(count):
                title, text, keywords = corpus.passage(rng, int(rng.integers(4, 9)))
                rows.append({"id": f"{key}:{n}", "source_id": sid, "source_kind": "file", "root": str(docs),
                             "path": sid[len(str(docs)) + 1:], "chunk_index": n, "text": text, "body_start": 0,
                             "keywords": keywords, "title": title, "parent_id": f"{key}:s{n // 3}",
                             "heading": "", "start_line": 1 + 10 * n, "end_line": 10 + 10 * n,
                             "content_hash": key, "mtime_ns": 0, "size": 0, "scheme": SCHEME_VERSION,
                             "model_id": spec.id, "ingested_at": now, "ocr_engine": "", "doc_class": "note",
                             "also_unchanged_on": [], "metadata": "{}", "embed_key": f"{key}{n:016x}"})
            sources.append(SourceRow(source_id=sid, source_kind="file", root=str(docs), path=sid[len(str(docs)) + 1:],
                                     title=title, content_hash=key, scheme=SCHEME_VERSION, model_id=spec.id,
                                     chunk_count=count, ingested_at=now))
            source_no += 1
        vectors = synthetic(sample, len(rows), rng)
        for row, vector in zip(rows, vectors, strict=True):
            row["vector"] = vector
        exact.add([r["id"] for r in rows], vectors)
        t0 = time.perf_counter()
        index.writes.replace_sources(sources, rows)
        write_s += time.perf_counter() - t0
        written += len(rows)
        if written % 100_000 < BUILD_BATCH:
            log(f"  {written:,} chunks written ({write_s:.0f} s in writes, {time.perf_counter() - started:.0f} s)")
    t0 = time.perf_counter()
    index.writes.refresh_indexes()
    optimize_s = time.perf_counter() - t0
    return {"chunks": index.registry.count_chunks(), "sources": source_no,
            "build_s": round(time.perf_counter() - started, 1), "write_s": round(write_s, 1),
            "optimize_s": round(optimize_s, 1)}


# ---- serving: a fresh process over a built index ---------------------------------------------
def serving_app(index_path: Path, docs: Path, embedder: Any = None) -> Any:
    """An Appliance over a built index as `serve` queries it (also scripts/bench_cards.py, bench_query_stages.py,
    bench_deletions.py: several over one index share one `embedder`)."""
    from appliance.service import Appliance

    return Appliance(load_settings({"BASE_DIR": str(docs), "DB_PATH": str(index_path), "MODELS_DIR": str(models_dir()),
                                    "CHUNK_TOKEN_BUDGET": str(BUDGET)}), embedder=embedder)


def book_read(app: Any, seconds: float = 60.0) -> bool:
    """Wait until the reader holds the address book of the version it reads (what a scoped vector side past the
    replica masks with: reads._postfiltered), as a server has it a moment after its first scoped query."""
    chunks = app.index.tables.chunks()
    deadline = time.monotonic() + seconds
    while chunks is not None and app.index.reader.address_book(chunks) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def scoped_folder(docs: Path) -> str:
    """What the scoped queries ask for: the first of the FOLDERS."""
    return str(docs / "f0")


def alternated(texts: Sequence[str], calls: Sequence[Any], cpu: dict[str, float],
               names: Sequence[str]) -> list[list[float]]:
    """Each call's wall times over `texts`, the calls taking turns per query (each goes first for as many queries),
    so the machine's drift and what one leaves warm weigh on them alike; each one's CPU a query into `cpu`."""
    times: list[list[float]] = [[] for _ in calls]
    spent = [0.0 for _ in calls]
    for n, text in enumerate(texts):
        for at in ((n + k) % len(calls) for k in range(len(calls))):
            before, started = cpu_ms(), time.perf_counter()
            calls[at](text)
            times[at].append(1000 * (time.perf_counter() - started))
            spent[at] += cpu_ms() - before
    cpu.update({name: round(total / len(texts), 1) for name, total in zip(names, spent, strict=True)})
    return times


def serve(index_path: Path, docs: Path, queries_file: Path, out_file: Path) -> None:
    """Warm queries through Appliance.search in this process; writes figures as JSON to out_file."""
    from appliance.storage.filters import Filter

    data = json.loads(queries_file.read_text(encoding="utf-8"))
    texts: list[str] = data["texts"]
    exact: list[list[str]] = data["exact"]
    vectors = np.load(queries_file.with_suffix(".npy"))
    app = serving_app(index_path, docs)
    scope = scoped_folder(docs)
    for text in texts[:5]:  # load the model, open the tables and their indexes
        app.search(text)
        app.search(text, scope=scope)
    book_read(app)

    cpu: dict[str, float] = {}

    def timed(call: Any, name: str = "") -> list[float]:
        times = []
        before = cpu_ms()
        for text in texts:
            started = time.perf_counter()
            call(text)
            times.append(1000 * (time.perf_counter() - started))
        if name:
            cpu[name] = round((cpu_ms() - before) / len(texts), 1)
        return times

    def prefiltered_search(text: str) -> None:  # the scoped vector side as LanceDB's prefilter answers it
        app.index.reader.address_book = lambda _: None
        try:
            app.search(text, top_k=10, scope=scope)
        finally:
            del app.index.reader.address_book

    ticks, own = machine_ticks(), cpu_ms()
    hybrid, scoped, prefiltered = alternated(
        texts, [lambda t: app.search(t, top_k=10), lambda t: app.search(t, top_k=10, scope=scope), prefiltered_search],
        cpu, ["hybrid", "scoped", "prefiltered"])
    machine = quiet(ticks, cpu_ms() - own)
    embed = timed(app.resources.embedder.embed_query)
    bm25 = timed(lambda t: app.index.reader.keyword_side(query_terms(t), 40, None, RANK_COLUMNS))
    bm25_scoped = timed(lambda t: app.index.reader.keyword_side(query_terms(t), 40, Filter(scope), RANK_COLUMNS))
    found = found_search = 0
    vector_ms = []
    for vector, truth in zip(vectors, exact, strict=True):
        started = time.perf_counter()
        got = app.index.reader.vector_side(vector, 10, None, ["id"]).rows
        vector_ms.append(1000 * (time.perf_counter() - started))
        found += len({r["id"] for r in got} & set(truth))
        wide = app.index.reader.vector_side(vector, 40, None, ["id"]).rows[:10]  # what search asks for (4 x top_k)
        found_search += len({r["id"] for r in wide} & set(truth))
    path = "replica" if app.index.reader._replica is not None else "lancedb"

    def pct(values: list[float], q: float) -> float:
        return round(float(np.percentile(values, q)), 1)

    out = {"queries": len(texts), "vector_path": path, "allocator": native_memory.allocator(),
           "hybrid_p50_ms": pct(hybrid, 50), "hybrid_p95_ms": pct(hybrid, 95),
           "scoped_p50_ms": pct(scoped, 50), "scoped_p95_ms": pct(scoped, 95),
           "hybrid_cpu_ms": cpu["hybrid"], "scoped_cpu_ms": cpu["scoped"],
           "prefiltered_p50_ms": pct(prefiltered, 50), "prefiltered_p95_ms": pct(prefiltered, 95),
           "prefiltered_cpu_ms": cpu["prefiltered"],
           "bm25_p50_ms": pct(bm25, 50), "bm25_p95_ms": pct(bm25, 95),
           "bm25_scoped_p95_ms": pct(bm25_scoped, 95),
           "embed_p50_ms": pct(embed, 50), "embed_p95_ms": pct(embed, 95),
           "vector_p50_ms": pct(vector_ms, 50), "vector_p95_ms": pct(vector_ms, 95),
           "recall_at_10": round(found / (10 * len(exact)), 4),
           "recall_at_10_of_40": round(found_search / (10 * len(exact)), 4),
           "rss_mb": round(rss_mb(), 1), "peak_rss_mb": round(rss_mb("VmHWM"), 1), **machine}
    out_file.write_text(json.dumps(out), encoding="utf-8")


# ---- syncing files with the real pipeline -----------------------------------------------------
class SyntheticEmbedder(OnnxEmbedder):
    """The real tokenizer cuts the chunks; a vector is drawn from a hash of its text (the model never runs)."""

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            seed = int.from_bytes(digest, "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_passages([text])[0]


def write_files(docs: Path, count: int, corpus: Corpus) -> None:
    """`count` short Markdown files (a title and two to five real sentences, each file distinct),
    a thousand per folder."""
    rng = np.random.default_rng(count)
    for n in range(count):
        folder = docs / f"f{n // 1000:03d}"
        if n % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        title, text, _ = corpus.passage(rng, int(rng.integers(2, 6)))
        (folder / f"note-{n:06d}.md").write_text(f"# {title}\n\nNote {n}. {text}\n", encoding="utf-8")


def sync_app(docs: Path, index: Path) -> Any:
    from appliance.service import Appliance

    rounds = {"SYNC_ROUND_FILES": os.environ["SYNC_ROUND_FILES"]} if "SYNC_ROUND_FILES" in os.environ else {}
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(index), "MODELS_DIR": str(models_dir()),
                              "CHUNK_TOKEN_BUDGET": str(BUDGET), **rounds})
    return Appliance(settings, embedder=SyntheticEmbedder(load_spec(DEFAULT_MODEL, models_dir()), models_dir()))


class WriteClock:
    """Records (seconds, files written so far) from a sync's progress: the writes may happen in child
    processes (appliance/sync/rounds.py), so the files the sync reports stored are what is counted."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, int]] = []

    def progress(self, phase: str, done: int, total: int, path: str) -> None:
        """The sync's progress callback."""
        if phase == "indexing" and done and (not self.marks or done > self.marks[-1][1]):
            self.marks.append((time.perf_counter(), done))

    def tenths(self, total: int) -> list[float]:
        """Files/s in each tenth of the files, timed from the first write."""
        times = np.array([t for t, _ in self.marks])
        done = np.array([n for _, n in self.marks], dtype=float)
        start_t, start_n = times[0], done[0]
        bounds = [start_n + (total - start_n) * k / 10 for k in range(11)]
        at = np.interp(bounds, done, times)
        at[0] = start_t
        return [round(float((bounds[k + 1] - bounds[k]) / max(at[k + 1] - at[k], 1e-9)), 1) for k in range(10)]


def sync_files(count: int, work: Path, corpus: Corpus, log: Any) -> dict[str, Any]:
    """First sync of `count` files, then the no-change re-sync (in-process and as `minirag sync`)."""
    docs, index = work / f"files-{count}" / "docs", work / f"files-{count}" / "index"
    write_files(docs, count, corpus)
    app = sync_app(docs, index)
    clock = WriteClock()
    started = time.perf_counter()
    report = app.sync(progress=clock.progress)
    first_s = time.perf_counter() - started
    assert report.ok and report.added == count, (report.added, report.failed[:3])
    log(f"  first sync of {count:,} files: {first_s:.1f} s ({report.chunks:,} chunks); per tenth "
        f"{clock.tenths(count)} files/s")
    started = time.perf_counter()
    again = sync_app(docs, index).sync()
    nochange_s = time.perf_counter() - started
    assert again.unchanged == count, again.to_dict()
    env = dict(os.environ, BASE_DIR=str(docs), DB_PATH=str(index), MODELS_DIR=str(models_dir()),
               CHUNK_TOKEN_BUDGET=str(BUDGET))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "appliance", "sync", "--json"], env=env, check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    cli_s = time.perf_counter() - started
    return {"sync_files": count, "sync_chunks": report.chunks, "first_sync_s": round(first_s, 1),
            "first_sync_tenths": clock.tenths(count), "nochange_sync_s": round(nochange_s, 2),
            "nochange_cli_s": round(cli_s, 2)}


def flat(count: int, work: Path, corpus: Corpus, profile: Path | None, log: Any) -> dict[str, Any]:
    """Sync `count` short files once; files/s per tenth of the run."""
    docs, index = work / "flat" / "docs", work / "flat" / "index"
    write_files(docs, count, corpus)
    app = sync_app(docs, index)
    clock = WriteClock()
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    report = app.sync(progress=clock.progress)
    if profiler and profile:
        profiler.disable()
        profiler.dump_stats(str(profile))
        log(f"profile written to {profile}")
    seconds = time.perf_counter() - started
    assert report.ok and report.added == count, report.to_dict()
    tenths = clock.tenths(count)
    if os.environ.get("BENCH_SCALE_MARKS"):
        Path(os.environ["BENCH_SCALE_MARKS"]).write_text(json.dumps(clock.marks))
    return {"files": count, "chunks": report.chunks, "seconds": round(seconds, 1),
            "files_per_s": round(count / seconds, 1), "tenths_files_per_s": tenths,
            "last_over_first": round(tenths[-1] / tenths[0], 3),
            "lowest_over_first": round(min(tenths) / tenths[0], 3), "writes": len(clock.marks),
            "peak_rss_mb": round(rss_mb("VmHWM"), 1)}  # from exec on: bench_convert._status


# ---- the whole run ---------------------------------------------------------------------------
def check_disk(work: Path, sizes: Sequence[int], sync_cap: int) -> None:
    """Stop before starting when the sizes asked for would not fit on the disk."""
    need = max(sizes) * BYTES_PER_CHUNK + min(max(sizes), sync_cap) * BYTES_PER_FILE
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free
    if need > free * 0.9:
        raise SystemExit(f"bench_scale: {max(sizes):,} chunks need about {need / 1e9:.1f} GB under {work}, "
                         f"and {free / 1e9:.1f} GB are free; ask for fewer (--sizes) or point --work elsewhere")


def measure(size: int, work: Path, corpus: Corpus, texts: list[str], sample: np.ndarray, query_vectors: np.ndarray,
            sync_cap: int, synced: dict[int, dict[str, Any]], log: Any, reuse: bool = False) -> dict[str, Any]:
    here = work / f"index-{size}"
    docs, index_path = here / "docs", here / "index"
    queries_file = here / "queries.json"
    out: dict[str, Any] = {"size": size}
    built = here / "build.json"
    if reuse and built.exists() and json.loads(queries_file.read_text(encoding="utf-8"))["texts"] == texts:
        log(f"{size:,} chunks: reusing the index built in {here}")
        out |= json.loads(built.read_text(encoding="utf-8"))
    else:
        shutil.rmtree(here, ignore_errors=True)
        exact = TopK(query_vectors)
        log(f"{size:,} chunks: building")
        out |= build_index(size, index_path, docs, corpus, sample, exact, log)
        out["disk_mb"] = round(disk_bytes(index_path) / 1e6, 1)
        queries_file.write_text(json.dumps({"texts": texts, "exact": exact.ids.tolist()}), encoding="utf-8")
        np.save(queries_file.with_suffix(".npy"), query_vectors)
        built.write_text(json.dumps({k: v for k, v in out.items() if k != "size"}), encoding="utf-8")
    log(f"{size:,} chunks: serving {len(texts)} queries in a new process")
    result = here / "serve.json"
    # as the image serves: jemalloc preloaded where it is installed (appliance/platform/native_memory.py)
    subprocess.run([sys.executable, __file__, "--serve", str(index_path), str(docs), str(queries_file), str(result)],
                   check=True, cwd=ROOT, env=native_memory.with_jemalloc(os.environ))
    out |= json.loads(result.read_text(encoding="utf-8"))
    files = min(size, sync_cap)
    if not files:  # --sync-files 0: queries only
        log(json.dumps(out))
        return out
    if files not in synced:
        log(f"{size:,} chunks: syncing {files:,} files")
        synced[files] = sync_files(files, work, corpus, log)
        shutil.rmtree(work / f"files-{files}", ignore_errors=True)
    out |= synced[files]
    log(json.dumps(out))
    return out


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["size"] for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=90)
    for key, label in (("hybrid_p95_ms", "hybrid p95"), ("scoped_p95_ms", "scoped p95"),
                       ("hybrid_p50_ms", "hybrid p50"), ("bm25_p95_ms", "BM25 p95")):
        left.plot(sizes, [r[key] for r in results], marker="o", label=label)
    left.axhline(50, color="grey", ls=":", lw=1)
    left.axhline(150, color="grey", ls="--", lw=1)
    left.set(xscale="log", xlabel="chunks in the index", ylabel="ms", title="warm query latency")
    left.legend(fontsize=8)
    right.plot(sizes, [r["rss_mb"] for r in results], marker="o", label="serving RSS")
    right.plot(sizes, [r["disk_mb"] for r in results], marker="s", label="index on disk")
    right.axhline(1536, color="grey", ls="--", lw=1)
    right.set(xscale="log", xlabel="chunks in the index", ylabel="MB", title="memory and disk")
    right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def table(results: list[dict[str, Any]]) -> str:
    cols = [("size", "chunks"), ("hybrid_p50_ms", "p50 ms"), ("hybrid_p95_ms", "p95 ms"),
            ("scoped_p95_ms", "scoped p95"), ("hybrid_cpu_ms", "CPU ms"), ("scoped_cpu_ms", "scoped CPU ms"),
            ("bm25_p95_ms", "BM25 p95"), ("steal_pct", "stolen %"), ("others_pct", "others %"),
            ("recall_at_10", "recall@10"), ("rss_mb", "RSS MB"), ("disk_mb", "disk MB"),
            ("write_s", "write s"), ("optimize_s", "optimize s"),
            ("sync_files", "files"), ("nochange_sync_s", "no-change s"), ("nochange_cli_s", "CLI s")]
    lines = ["| " + " | ".join(c[1] for c in cols) + " |", "|" + "---:|" * len(cols)]
    lines += ["| " + " | ".join(f"{r.get(k, ''):,}" if isinstance(r.get(k), int) else str(r.get(k, ""))
                                for k, _ in cols) + " |" for r in results]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="chunks per index, comma-separated")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sync-files", type=int, default=100_000, help="most files of the no-change sync")
    parser.add_argument("--plot", type=Path, default=CACHE / "growth.png")
    parser.add_argument("--work", type=Path, default=None,
                        help="scratch folder (default: new in $TMPDIR; not in a hidden folder: the walk skips those)")
    parser.add_argument("--keep", action="store_true", help="keep the indexes in --work")
    parser.add_argument("--reuse", action="store_true",
                        help="serve the indexes a run with --work DIR --keep built there (same queries) instead of "
                             "building them again; implies --keep")
    parser.add_argument("--flat", type=int, default=0, help="only the flat-rate sync of this many files")
    parser.add_argument("--profile", type=Path, default=None, help="with --flat: write a cProfile here")
    parser.add_argument("--from-json", type=Path, nargs="+", default=None,
                        help="only plot and tabulate the sizes of earlier --json outputs (a later file's size wins)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", nargs=4, metavar=("INDEX", "DOCS", "QUERIES", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*(Path(p) for p in args.serve))
        return
    if args.from_json:
        merged = {r["size"]: r for f in args.from_json for r in json.loads(f.read_text(encoding="utf-8"))["sizes"]}
        results = [merged[size] for size in sorted(merged)]
        plot(results, args.plot)
        print(json.dumps({"sizes": results}, indent=1) if args.json else f"{table(results)}\nplot: {args.plot}")
        return

    def log(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    CACHE.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_scale-"))
    if not args.flat:  # --reuse builds only the sizes not kept yet
        check_disk(work, [n for n in sizes if not (args.reuse and (work / f"index-{n}" / "queries.json").exists())]
                   or [0], args.sync_files)
    corpus = Corpus(shared_path())
    out: dict[str, Any] = {"loadAverage": [round(x, 2) for x in os.getloadavg()]}
    try:
        if args.flat:
            out["flat"] = flat(args.flat, work, corpus, args.profile, log)
        else:
            texts = queries(shared_path(), args.queries)
            sample, query_vectors = real_vectors(corpus, texts, log)
            synced: dict[int, dict[str, Any]] = {}
            out["sizes"] = [measure(size, work, corpus, texts, sample, query_vectors, args.sync_files, synced, log,
                                    args.reuse) for size in sizes]
            plot(out["sizes"], args.plot)
            out["plot"] = str(args.plot)
    finally:
        if not (args.keep or args.reuse):
            shutil.rmtree(work, ignore_errors=True)
    out["loadAverageAfter"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(out, indent=1))
    elif args.flat:
        f = out["flat"]
        print(f"{f['files']:,} files ({f['chunks']:,} chunks) in {f['seconds']} s, {f['files_per_s']} files/s; "
              f"per tenth {f['tenths_files_per_s']}; last/first {f['last_over_first']}, "
              f"lowest/first {f['lowest_over_first']}")
    else:
        print(table(out["sizes"]))
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
