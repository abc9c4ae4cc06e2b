#!/usr/bin/env python3
"""Glued words and conversion seconds of every text PDF in the corpus, per text extractor.

    python scripts/pdf_text_report.py [DIR] [--json] [--only SUBSTRING] [--no-pdfminer]

DIR defaults to $MINIRAG_SHARED/corpus (../shared/corpus). Scanned PDFs (EXPECTED.tsv's
needs_ocr column) and PDFs without any text layer are skipped, as are files pdfium cannot
open. For each remaining PDF:

* pdfminer: markitdown's PdfConverter (pdfplumber per page, then pdfminer for the whole
  document): the text path before this report;
* pdfium:   pypdfium2's text page of every page, joined;
* shipped:  `to_markdown` as the appliance converts the file today (no OCR).

A PDF whose pdfium text is over 5% control characters (glyphs of fonts without a Unicode
map) is marked unreadable and left out of the summary: no extractor here makes text of it.

A word is a run of letters; a glued word is one of 18 or more letters ("Pleasenotethat...").
The glued share is glued words / all words. Seconds are wall-clock seconds in this process,
after the imports. EXPECTED.tsv's must-find strings for PDFs are checked in the shipped text,
whitespace-normalised.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.errors import ApplianceError  # noqa: E402
from appliance.ingest.convert import glued_share, to_markdown, word_counts  # noqa: E402
from appliance.ingest.ocr import pdf_page_texts  # noqa: E402


def _corpus(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    shared = os.environ.get("MINIRAG_SHARED") or str(ROOT.parent / "shared")
    return Path(shared) / "corpus"


def _expected(corpus: Path) -> tuple[set[str], dict[str, str]]:
    """(scanned PDFs, must-find string per text PDF), relative paths."""
    scanned: set[str] = set()
    must: dict[str, str] = {}
    tsv = corpus / "EXPECTED.tsv"
    if not tsv.exists():
        return scanned, must
    with open(tsv, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if not row["path"].lower().endswith(".pdf"):
                continue
            if row.get("needs_ocr", "").strip() == "yes" or "scan" in row.get("format", ""):
                scanned.add(row["path"])
            else:
                must[row["path"]] = row["expected_substring"]
    return scanned, must


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


_UNMAPPED = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    try:
        out = fn()
    except (ApplianceError, Exception) as exc:  # noqa: BLE001 - reported, not raised
        return None, time.perf_counter() - t, f"{type(exc).__name__}: {str(exc)[:120]}"
    return out, time.perf_counter() - t, None


def _pdfminer(path: Path) -> str:
    from markitdown import StreamInfo
    from markitdown.converters import PdfConverter

    with open(path, "rb") as fh:
        return PdfConverter().convert(fh, StreamInfo(extension=".pdf")).markdown


def _pdfium(path: Path) -> str:
    return "\n\n".join(t.strip() for t in pdf_page_texts(path))


def measure(path: Path, rel: str, must: str | None, pdfminer: bool) -> dict:
    row: dict = {"path": rel}
    texts, secs, err = _timed(lambda: _pdfium(path))
    if err is not None or texts is None:
        return {**row, "skipped": f"pdfium cannot read it ({err})"}
    if not any(not c.isspace() for c in texts):
        return {**row, "skipped": "no text layer"}
    row["pdfium"] = {"glued": glued_share(texts), "words": word_counts(texts)[0], "seconds": secs}
    unmapped = len(_UNMAPPED.findall(texts)) / sum(1 for c in texts if not c.isspace())
    if unmapped > 0.05:
        row["note"] = f"unreadable: {100 * unmapped:.0f}% of its characters are glyphs without a Unicode map"
    extractors = [("shipped", lambda: to_markdown(path, ocr=None, max_file_size=0).markdown)]
    if pdfminer:
        extractors.insert(0, ("pdfminer", lambda: _pdfminer(path)))
    for name, fn in extractors:
        text, secs, err = _timed(fn)
        if err is not None or text is None:
            row[name] = {"error": err, "seconds": secs}
            continue
        row[name] = {"glued": glued_share(text), "words": word_counts(text)[0], "seconds": secs}
        if name == "shipped" and must is not None:
            row["must_find"] = _norm(must) in _norm(text)
    return row


def _pct(cell: dict | None) -> str:
    if not cell:
        return "-"
    if "error" in cell:
        return "fail"
    return f"{100 * cell['glued']:.2f}%"


def _sec(cell: dict | None) -> str:
    return f"{cell['seconds']:.2f}" if cell else "-"


def summary(rows: list[dict]) -> dict:
    done = [r for r in rows if "skipped" not in r and "note" not in r]
    out: dict = {"pdfs": len(done), "skipped": sum(1 for r in rows if "skipped" in r),
                 "unreadable": [r["path"] for r in rows if "note" in r]}
    for name in ("pdfminer", "pdfium", "shipped"):
        cells = [r[name] for r in done if name in r]
        ok = [c for c in cells if "error" not in c]
        if not cells:
            continue
        words = sum(c["words"] for c in ok)
        glued = sum(c["glued"] * c["words"] for c in ok)
        out[name] = {
            "failed": len(cells) - len(ok),
            "over_1pct": sum(1 for c in ok if c["glued"] >= 0.01),
            "max_glued": max((c["glued"] for c in ok), default=0.0),
            "glued_all_words": glued / words if words else 0.0,
            "seconds_total": sum(c["seconds"] for c in cells),
            "seconds_max": max((c["seconds"] for c in cells), default=0.0),
        }
    checks = [r["must_find"] for r in done if "must_find" in r]
    out["must_find"] = f"{sum(checks)}/{len(checks)}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?")
    ap.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    ap.add_argument("--only", default="", help="only paths containing this substring")
    ap.add_argument("--no-pdfminer", action="store_true", help="skip the (slow) pdfminer column")
    args = ap.parse_args()
    corpus = _corpus(args.corpus)
    scanned, must = _expected(corpus)
    import markitdown.converters  # noqa: F401 - imported before timing (~3 s)

    rows = []
    for path in sorted(corpus.rglob("*")):
        if path.suffix.lower() != ".pdf" or not path.is_file():
            continue
        rel = path.relative_to(corpus).as_posix()
        if args.only not in rel:
            continue
        if rel in scanned:
            rows.append({"path": rel, "skipped": "scanned (EXPECTED.tsv)"})
            continue
        rows.append(measure(path, rel, must.get(rel), not args.no_pdfminer))
        if not args.json:
            r = rows[-1]
            if "skipped" in r:
                print(f"{'skip':>8} {'':>8} {'':>8}  {'':>23}  {rel}: {r['skipped']}", flush=True)
            else:
                print(f"{_pct(r.get('pdfminer')):>8} {_pct(r.get('pdfium')):>8} {_pct(r.get('shipped')):>8}  "
                      f"{_sec(r.get('pdfminer')):>7} {_sec(r.get('pdfium')):>7} {_sec(r.get('shipped')):>7}  "
                      f"{rel}{'' if r.get('must_find', True) else '  MUST-FIND MISSING'}"
                      f"{'  (' + r['note'] + ')' if 'note' in r else ''}", flush=True)
    result = {"rows": rows, "summary": summary(rows)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("glued share: pdfminer / pdfium / shipped; seconds: pdfminer / pdfium / shipped")
        print(json.dumps(result["summary"], indent=1))
    bad = result["summary"].get("shipped", {})
    return 1 if bad.get("over_1pct") or "must_find" in result["summary"] and not all(
        r.get("must_find", True) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
