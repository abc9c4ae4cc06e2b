#!/usr/bin/env python3
"""Conversion figures: seconds per format, OCR seconds per page and CER, peak RSS through the pool.

    python scripts/bench_convert.py [DIR] [--json] [--workers N] [--no-ocr] [--dpi 200,300]

DIR defaults to $MINIRAG_SHARED/corpus (../shared/corpus). Every file with a supported
extension (and, with OCR, every image) under DIR is converted through ConvertPool; the
time of each file is measured around `pool.convert`, so it includes the hop to the
worker (about a millisecond). Peak RSS is sampled every 50 ms over the workers and their
tesseract children.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.errors import ApplianceError  # noqa: E402
from appliance.ingest.cer import cer  # noqa: E402
from appliance.ingest.convert import IMAGE_EXTENSIONS, SUPPORTED_EXTENSIONS  # noqa: E402
from appliance.ingest.isolate import ConvertPool  # noqa: E402
from appliance.ingest.ocr import OcrConfig, ocr_pdf_pages, ocr_status  # noqa: E402

OCR_PAGES = [
    ("rus", "ocr/aleph/russian_scan_derived.pdf", "ocr/aleph/russian.gt.txt"),
    ("rus", "ocr/easydict/ocr-ru-poetry-11_derived.pdf", "ocr/easydict/ocr-ru-poetry-11.gt.txt"),
    ("deu", "ocr/kreuzberg-german/image_only_german_pdf.pdf",
     "ocr/kreuzberg-german/image_only_german_pdf.page1.gt.txt"),
]


def _status(pid: int | str, field: str) -> int:
    """A number from /proc/PID/status (VmRSS, VmHWM in KB; PPid); 0 once the process is gone.

    VmHWM, a process's own peak, counts from its exec. getrusage's ru_maxrss does not: Linux carries the
    high-water mark of the memory image an exec replaces into it, so a child started from a large process (a
    pytest worker that ran other tests) reports the parent's peak as its own."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_kb(pid: int) -> int:
    return _status(pid, "VmRSS")


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, including children started from any of its threads
    (the conversion pool starts workers from its own threads, not the main one)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            with contextlib.suppress(OSError):  # the thread ended
                todo.extend(int(x) for x in (task / "children").read_text().split())
    return out


def bench_corpus(root: Path, ocr: OcrConfig | None, workers: int) -> dict:
    exts = set(SUPPORTED_EXTENSIONS) | (set(IMAGE_EXTENSIONS) if ocr else set())
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in exts)
    times: dict[str, list[float]] = defaultdict(list)
    slowest: dict[str, tuple[float, str]] = {}
    errors: dict[str, int] = defaultdict(int)
    error_list: list[str] = []
    peak = {"workers_kb": 0, "sum_kb": 0}
    stop = threading.Event()
    t0 = time.monotonic()
    with ConvertPool(workers=workers, timeout_s=300, memory_bytes=2048 << 20, ocr=ocr,
                     max_file_size=100 << 20) as pool:

        def sample() -> None:
            while not stop.is_set():
                total = 0
                for pid in pool.worker_pids():
                    kb = sum(_rss_kb(p) for p in _tree(pid))
                    peak["workers_kb"] = max(peak["workers_kb"], kb)
                    total += kb
                peak["sum_kb"] = max(peak["sum_kb"], total)
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        def one(path: Path) -> None:
            ext = path.suffix.lower()
            start = time.monotonic()
            try:
                pool.convert(path)
            except ApplianceError as exc:
                errors[type(exc).__name__] += 1
                error_list.append(f"{path.relative_to(root)}: {exc.code}: {str(exc)[len(str(path)) + 2:][:120]}")
                return
            dt = time.monotonic() - start
            times[ext].append(dt)
            if dt > slowest.get(ext, (0.0, ""))[0]:
                slowest[ext] = (dt, str(path.relative_to(root)))

        with ThreadPoolExecutor(max_workers=workers) as ex:
            list(ex.map(one, files))
        stop.set()
        sampler.join()
        restarts = pool.restarts
    import resource

    per_ext = {
        ext: {
            "files": len(v),
            "mean_s": round(statistics.fmean(v), 3),
            "max_s": round(max(v), 3),
            "slowest": slowest[ext][1],
        }
        for ext, v in sorted(times.items())
    }
    return {
        "files": len(files),
        "converted": sum(len(v) for v in times.values()),
        "wall_s": round(time.monotonic() - t0, 1),
        "workers": workers,
        "per_extension": per_ext,
        "errors": dict(errors),
        "error_files": sorted(error_list),
        "worker_restarts": restarts,
        "peak_rss_one_worker_mb": round(peak["workers_kb"] / 1024),
        "peak_rss_all_workers_mb": round(peak["sum_kb"] / 1024),
        "parent_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def bench_ocr(corpus: Path, dpis: list[int]) -> dict:
    out: dict = {}
    for dpi in dpis:
        cfg = replace(OcrConfig(), dpi=dpi)
        rows = []
        for lang, pdf, truth in OCR_PAGES:
            start = time.monotonic()
            [(_, text)] = list(ocr_pdf_pages(corpus / pdf, [0], cfg))
            dt = time.monotonic() - start
            rows.append({"lang": lang, "page": pdf, "seconds": round(dt, 2),
                         "cer": round(cer(text, (corpus / truth).read_text(encoding="utf-8")), 4)})
        by_lang = defaultdict(list)
        for r in rows:
            by_lang[r["lang"]].append(r)
        out[str(dpi)] = {
            "pages": rows,
            "seconds_per_page": round(statistics.fmean(r["seconds"] for r in rows), 2),
            "cer_by_language": {k: round(statistics.fmean(r["cer"] for r in v), 4) for k, v in by_lang.items()},
        }
    return out


def main() -> int:
    shared = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", type=Path, default=shared / "corpus")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-ocr", action="store_true", help="skip images and OCR figures")
    ap.add_argument("--dpi", default="200,300", help="render resolutions to compare for OCR")
    args = ap.parse_args()
    if not args.dir.is_dir():
        print(f"no such directory: {args.dir}", file=sys.stderr)
        return 2
    ocr = None if args.no_ocr else OcrConfig()
    state, hint = ocr_status(ocr)
    if ocr is not None and hint is not None:
        print(f"OCR unavailable ({hint}); running without it", file=sys.stderr)
        ocr = None
    result: dict = {"dir": str(args.dir), "ocr": state}
    result["corpus"] = bench_corpus(args.dir, ocr, args.workers)
    if ocr is not None and (shared / "corpus" / "ocr").is_dir():
        result["ocr_pages"] = bench_ocr(shared / "corpus", [int(d) for d in args.dpi.split(",")])
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    c = result["corpus"]
    print(f"{c['converted']}/{c['files']} files converted in {c['wall_s']} s with {c['workers']} workers "
          f"({result['ocr']})")
    print(f"{'ext':8} {'files':>5} {'mean s':>8} {'max s':>8}  slowest")
    for ext, r in c["per_extension"].items():
        print(f"{ext:8} {r['files']:>5} {r['mean_s']:>8.3f} {r['max_s']:>8.3f}  {r['slowest']}")
    print(f"errors: {c['errors']}  worker restarts: {c['worker_restarts']}")
    for line in c["error_files"]:
        print(f"  {line}")
    print(f"peak RSS: one worker (+tesseract) {c['peak_rss_one_worker_mb']} MB, all workers "
          f"{c['peak_rss_all_workers_mb']} MB, parent {c['parent_max_rss_mb']} MB")
    for dpi, r in result.get("ocr_pages", {}).items():
        pages = ", ".join(f"{p['lang']} {p['cer']:.4f}/{p['seconds']}s" for p in r["pages"])
        print(f"OCR {dpi} dpi: {r['seconds_per_page']} s/page; CER by language {r['cer_by_language']}; {pages}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
