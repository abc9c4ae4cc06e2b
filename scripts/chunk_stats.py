#!/usr/bin/env python3
"""Chunk every document under some folders and print the figures of the chunking scheme.

    python scripts/chunk_stats.py DIR... [--budget N] [--tokenizer tokenizer.json] [--json]

Each file is converted with markitdown (files it cannot convert are counted and
skipped), cut with the real tokenizer of the embedding model, and measured: chunks,
tokens per chunk (median, p99, share over the model's 512-token window), section size
in characters (median, p99, share over the 4,000-character cap) and reconstruction
inflation (characters of all chunk texts over characters of the Markdown).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.ingest.chunk import (  # noqa: E402
    SCHEME_VERSION,
    SECTION_CHAR_CAP,
    audit,
    chunk_document,
    section_text,
)

DEFAULT_TOKENIZER = ROOT / "models" / "baked" / "intfloat__multilingual-e5-small" / "tokenizer.json"
MODEL_WINDOW = 512
TEXT_WINDOW = MODEL_WINDOW - 16
"""What the appliance lets a chunk's text take: the window less specials and the passage prefix."""
SKIP = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".zip", ".bin"}


def percentile(values: list[int], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--budget", type=int, default=110)
    ap.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--timeout", type=int, default=120, help="seconds allowed per conversion")
    args = ap.parse_args(argv)

    from markitdown import MarkItDown
    from tokenizers import Tokenizer

    if not args.tokenizer.is_file():
        print(f"tokenizer not found: {args.tokenizer}", file=sys.stderr)
        return 2
    tok = Tokenizer.from_file(str(args.tokenizer))
    tok.no_truncation()
    tok.no_padding()

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    converter = MarkItDown()

    def too_slow(signum: int, frame: object) -> None:
        raise TimeoutError("conversion took too long")

    signal.signal(signal.SIGALRM, too_slow)
    chunk_tokens: list[int] = []
    section_sizes: list[int] = []
    md_chars = text_chars = docs = failed = empty = broken = 0
    started = time.perf_counter()
    for root in args.dirs:
        if not root.is_dir():
            print(f"not a directory: {root}", file=sys.stderr)
            return 2
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if path.suffix.lower() in SKIP:
                continue
            signal.alarm(args.timeout)
            try:
                md = converter.convert(str(path)).markdown
            except Exception:  # noqa: BLE001 - a converter failure is a figure here
                failed += 1
                continue
            finally:
                signal.alarm(0)
            if not md.strip():
                empty += 1
                continue
            docs += 1
            chunks = chunk_document(md, count_tokens=count, budget=args.budget, title=path.stem,
                                    ceiling=TEXT_WINDOW)
            if audit(md, chunks, count_tokens=count, budget=args.budget, ceiling=TEXT_WINDOW):
                broken += 1
            md_chars += len(md)
            text_chars += sum(len(c.text) for c in chunks)
            chunk_tokens.extend(count(c.text) for c in chunks)
            by_section: dict[int, list] = {}
            for c in chunks:
                by_section.setdefault(c.section, []).append(c)
            section_sizes.extend(len(section_text(v)) for v in by_section.values())

    figures = {
        "scheme": SCHEME_VERSION,
        "budget": args.budget,
        "tokenizer": str(args.tokenizer),
        "documents": docs,
        "conversion_failures": failed,
        "empty_documents": empty,
        "documents_breaking_a_rule": broken,
        "chunks": len(chunk_tokens),
        "tokens_median": percentile(chunk_tokens, 0.5),
        "tokens_p99": percentile(chunk_tokens, 0.99),
        "tokens_max": max(chunk_tokens, default=0),
        "chunks_over_budget": sum(t > args.budget for t in chunk_tokens),
        "share_over_model_window": (sum(t > MODEL_WINDOW for t in chunk_tokens) / len(chunk_tokens)
                                    if chunk_tokens else 0.0),
        "sections": len(section_sizes),
        "section_chars_median": percentile(section_sizes, 0.5),
        "section_chars_p99": percentile(section_sizes, 0.99),
        "sections_over_cap": sum(s > SECTION_CHAR_CAP for s in section_sizes),
        "reconstruction_inflation": text_chars / md_chars if md_chars else 0.0,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        width = max(len(k) for k in figures)
        for key, value in figures.items():
            shown = f"{value:.4f}" if isinstance(value, float) and not value.is_integer() else value
            print(f"{key:<{width}}  {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
