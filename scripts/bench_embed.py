#!/usr/bin/env python
"""Measure the baked embedding models: chunks/s on ~200- and ~400-token passages, RSS, query latency,
the cosine between models' embeddings of the same passages, and (--quality N) recall@1 / MRR@10
of N XQuAD-R questions (EN/DE/RU) against the 720-passage multilingual pool.

usage: python scripts/bench_embed.py [--models ID ...] [--threads N] [--per-size N] [--quality N]
                                    [--models-dir DIR] [--json]

Each model runs in its own subprocess so peak RSS is that model's alone. Passages
are mixed EN (scifact), DE and RU (xquad-r) text cut to the target token counts.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EVAL = Path(os.environ.get("MINIRAG_EVAL_DIR", "/work/shared/eval/retrieval"))
CORPORA = {"en": EVAL / "scifact" / "corpus.jsonl",
           "de": EVAL / "xquad-r" / "xquad-r-de-passage" / "corpus.jsonl",
           "ru": EVAL / "xquad-r" / "xquad-r-ru-passage" / "corpus.jsonl"}
QUERIES = ["What causes white matter damage in newborns?", "Wann wurde die Universität gegründet?",
           "Какая река протекает через город?", "effects of vitamin D on bone density",
           "Wer gewann das Spiel im Jahr 2016?", "Кто был первым президентом?"]
DEFAULT_MODELS = ["intfloat/multilingual-e5-small", "intfloat/multilingual-e5-small-fp32"]


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def build_passages(embedder, per_size: int) -> dict[int, list[str]]:
    """per_size passages of ~200 and of ~400 tokens, languages in turn, cut at token boundaries."""
    tok = embedder._ensure_tokenizer()
    streams = {}
    for lang, path in CORPORA.items():
        with open(path, encoding="utf-8") as handle:
            streams[lang] = [" ".join(filter(None, (d.get("title", ""), d["text"])))
                             for d in map(json.loads, handle)]
    out: dict[int, list[str]] = {200: [], 400: []}
    cursor = dict.fromkeys(streams, 0)
    for size in (200, 400):
        while len(out[size]) < per_size:
            lang = list(streams)[len(out[size]) % len(streams)]
            docs, text = streams[lang], ""
            while True:
                text = (text + " " + docs[cursor[lang] % len(docs)]).strip()
                cursor[lang] += 1
                encoding = tok.encode(text, add_special_tokens=False)
                if len(encoding.ids) >= size:
                    out[size].append(text[:encoding.offsets[size - 1][1]])
                    break
    return out


def retrieval_quality(embedder, n_queries: int) -> dict:
    """recall@1 and MRR@10 on xquad-r-multi-passage (each question has its passage in 3 languages)."""
    import numpy as np

    folder = EVAL / "xquad-r" / "xquad-r-multi-passage"
    with open(folder / "corpus.jsonl", encoding="utf-8") as handle:
        corpus = [json.loads(line) for line in handle]
    with open(folder / "queries.jsonl", encoding="utf-8") as handle:
        queries = [json.loads(line) for line in handle]
    relevant: dict[str, set[str]] = {}
    with open(folder / "qrels" / "test.tsv", encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            qid, did, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                relevant.setdefault(qid, set()).add(did)
    step = max(1, len(queries) // n_queries)
    queries = [q for q in queries[::step] if q["_id"] in relevant][:n_queries]
    passages = embedder.embed_passages([d["text"] for d in corpus])
    vectors = embedder.embed_queries([q["text"] for q in queries])
    ids = [d["_id"] for d in corpus]
    hits1, rr = 0, 0.0
    for q, v in zip(queries, vectors, strict=True):
        ranked = [ids[i] for i in np.argsort(-(passages @ v))[:10]]
        hits1 += ranked[0] in relevant[q["_id"]]
        rr += next((1 / (r + 1) for r, d in enumerate(ranked) if d in relevant[q["_id"]]), 0.0)
    return {"queries": len(queries), "recall_at_1": round(hits1 / len(queries), 4),
            "mrr_at_10": round(rr / len(queries), 4)}


def worker(model_id: str, models_dir: Path, threads: int, per_size: int, out_npz: Path, quality: int = 0) -> dict:
    import numpy as np

    from appliance.embed import OnnxEmbedder, load_spec

    base = _rss_mb()
    embedder = OnnxEmbedder(load_spec(model_id), models_dir, threads=threads)
    passages = build_passages(embedder, per_size)
    start = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - start
    embedder.embed_passages(passages[200][:8])  # warm-up
    after_load = _rss_mb()
    result = {"model": model_id, "threads": threads, "load_s": round(load_s, 2),
              "loadavg_1min": round(os.getloadavg()[0], 1),
              "rss_before_load_mb": round(base), "rss_after_load_mb": round(after_load)}
    vectors = {}
    for size, texts in passages.items():
        start, cpu_start = time.perf_counter(), _cpu_s()
        vectors[size] = embedder.embed_passages(texts)
        elapsed, cpu = time.perf_counter() - start, _cpu_s() - cpu_start
        result[f"chunks_per_s_{size}tok"] = round(len(texts) / elapsed, 2)
        # CPU time is far less sensitive than wall time to other load on the machine
        result[f"cpu_ms_per_chunk_{size}tok"] = round(1000 * cpu / len(texts), 1)
    latencies = []
    for query in QUERIES * 4:
        start = time.perf_counter()
        embedder.embed_query(query)
        latencies.append((time.perf_counter() - start) * 1000)
    result["query_latency_ms_median"] = round(statistics.median(latencies), 1)
    result["query_latency_ms_max"] = round(max(latencies), 1)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if quality:
        result["xquad_r_multi"] = retrieval_quality(embedder, quality)
    result["model_file_mb"] = round((embedder.models_dir / embedder.spec.dir_name / "model.onnx").stat().st_size / 1e6)
    np.savez(out_npz, **{f"s{size}": v for size, v in vectors.items()})
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--per-size", type=int, default=150, help="passages per size (two sizes)")
    parser.add_argument("--quality", type=int, default=0, metavar="N", help="also score N XQuAD-R questions")
    parser.add_argument("--models-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from appliance.models.manifest import default_models_dir

    models_dir = args.models_dir or Path(os.environ.get("MODELS_DIR") or default_models_dir())
    if args.worker:
        print(json.dumps(worker(args.worker, models_dir, args.threads, args.per_size, args.out, args.quality)))
        return 0

    import numpy as np

    results, arrays = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for model_id in args.models:
            out = Path(tmp) / (model_id.replace("/", "__") + ".npz")
            proc = subprocess.run([sys.executable, __file__, "--worker", model_id, "--out", str(out),
                                   "--threads", str(args.threads), "--per-size", str(args.per_size),
                                   "--quality", str(args.quality),
                                   "--models-dir", str(models_dir)], capture_output=True, text=True)
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr)
                return 1
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            arrays[model_id] = dict(np.load(out))
    report = {"models": results, "passages": 2 * args.per_size, "cosine": []}
    ids = list(arrays)
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            cos = np.concatenate([(arrays[a][k] * arrays[b][k]).sum(axis=1) for k in arrays[a]])
            report["cosine"].append({"a": a, "b": b, "min": round(float(cos.min()), 4),
                                     "mean": round(float(cos.mean()), 4), "median": round(float(np.median(cos)), 4)})
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['passages']} passages (half ~200, half ~400 tokens; EN/DE/RU), {args.threads} threads")
    for r in results:
        print(f"{r['model']}: {r['model_file_mb']} MB file, load {r['load_s']} s, "
              f"{r['chunks_per_s_200tok']} chunks/s @200 tok ({r['cpu_ms_per_chunk_200tok']} CPU-ms each), "
              f"{r['chunks_per_s_400tok']} chunks/s @400 tok ({r['cpu_ms_per_chunk_400tok']} CPU-ms each), "
              f"RSS after load {r['rss_after_load_mb']} MB, peak {r['peak_rss_mb']} MB, "
              f"query {r['query_latency_ms_median']} ms median ({r['query_latency_ms_max']} max), "
              f"machine load {r['loadavg_1min']}")
        if "xquad_r_multi" in r:
            q = r["xquad_r_multi"]
            print(f"  XQuAD-R multi ({q['queries']} questions): recall@1 {q['recall_at_1']}, MRR@10 {q['mrr_at_10']}")
    for c in report["cosine"]:
        print(f"cosine {c['a']} vs {c['b']}: mean {c['mean']}, median {c['median']}, min {c['min']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
