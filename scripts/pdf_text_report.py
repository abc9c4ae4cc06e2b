#!/usr/bin/env python3
"""Glued words, garbled pages, OCRed pages and conversion seconds of every text PDF in the corpus.

    python scripts/pdf_text_report.py [DIR] [--json] [--only SUBSTRING] [--no-pdfminer] [--no-ocr] [--pages]

DIR defaults to $MINIRAG_SHARED/corpus (../shared/corpus). Scanned PDFs (EXPECTED.tsv's
needs_ocr column) and PDFs without any text layer are skipped, as are files pdfium cannot
open. For each remaining PDF:

* pdfminer: markitdown's PdfConverter (pdfplumber per page, then pdfminer for the whole
  document): the text path before pdfium;
* layer:    pdfium's text layer of every page as the converter cleans it, without OCR: the
  text path before garbled pages were OCRed;
* shipped:  `to_markdown` as the appliance converts the file today, with OCR (tesseract,
  default OcrConfig) unless --no-ocr;
* garbled:  pages whose text layer `pdf_page_needs_ocr` calls garbled (`garbled_share` of the
  page at least GARBLED_PAGE_SHARE), and the highest share of any page;
* ocr:      the pages `to_markdown` OCRed (its metadata "ocr_pages").

Where the shipped text has 1% or more glued words, its distinct 18+ letter words are listed, to
judge by eye whether they are words run together or long real words (German compounds).

--pages also prints, for every page of every PDF (scans included), its non-space characters,
its `garbled_share` and what `pdf_page_needs_ocr` decides: the measure the threshold was chosen on.

A word is a run of letters; a glued word is one of 18 or more letters ("Pleasenotethat...").
The glued share is glued words / all words. Seconds are wall-clock seconds in this process,
after the imports (OCR runs tesseract at 300 dpi, a few seconds per page on an idle core).
EXPECTED.tsv's must-find strings for PDFs are checked in the shipped text, whitespace-normalised.
Exit status 1 when a shipped conversion fails, has 1% or more glued words or misses its must-find string.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.errors import ApplianceError  # noqa: E402
from appliance.ingest.convert import to_markdown  # noqa: E402
from appliance.ingest.convert_pdf import (  # noqa: E402
    GARBLED_PAGE_SHARE,
    GLUED_WORD_LETTERS,
    clean_pdfium_text,
    garbled_share,
    glued_share,
    glued_words,
    pdf_page_needs_ocr,
    word_counts,
)
from appliance.ingest.ocr import OcrConfig, pdf_page_texts  # noqa: E402


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


def _timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    try:
        out = fn()
    except (ApplianceError, Exception) as exc:  # noqa: BLE001 - reported, not raised
        return None, time.perf_counter() - t, f"{type(exc).__name__}: {str(exc)[:160]}"
    return out, time.perf_counter() - t, None


def _pdfminer(path: Path) -> str:
    from markitdown import StreamInfo
    from markitdown.converters import PdfConverter

    with open(path, "rb") as fh:
        return PdfConverter().convert(fh, StreamInfo(extension=".pdf")).markdown


def page_rows(raw: list[str], min_chars: int) -> list[dict]:
    """Per page: non-space characters, garbled share, and why it is OCRed ("" when it is not)."""
    return [{"page": i, "chars": sum(1 for c in clean_pdfium_text(t) if not c.isspace()),
             "garbled": round(garbled_share(t), 4), "needs_ocr": pdf_page_needs_ocr(t, min_chars)}
            for i, t in enumerate(raw, 1)]


def measure(path: Path, rel: str, must: str | None, pdfminer: bool, ocr: OcrConfig | None) -> dict:
    row: dict = {"path": rel}
    raw, secs, err = _timed(lambda: pdf_page_texts(path))
    if err is not None or raw is None:
        return {**row, "skipped": f"pdfium cannot read it ({err})"}
    layer = "\n\n".join(clean_pdfium_text(t) for t in raw)
    if not any(not c.isspace() for c in layer):
        return {**row, "skipped": "no text layer"}
    row["pages"] = page_rows(raw, ocr.min_chars_per_page if ocr is not None else 1)
    row["garbled_pages"] = [p["page"] for p in row["pages"] if p["needs_ocr"] == "garbled"]
    row["layer"] = {"glued": glued_share(layer), "words": word_counts(layer)[0], "seconds": secs}
    extractors = [("shipped", lambda: to_markdown(path, ocr=ocr, max_file_size=0))]
    if pdfminer:
        extractors.insert(0, ("pdfminer", lambda: _pdfminer(path)))
    for name, fn in extractors:
        out, secs, err = _timed(fn)
        if err is not None or out is None:
            row[name] = {"error": err, "seconds": secs}
            continue
        text = out if isinstance(out, str) else out.markdown
        row[name] = {"glued": glued_share(text), "words": word_counts(text)[0], "seconds": secs}
        if name == "shipped":
            row["ocr_pages"] = out.metadata.get("ocr_pages", "")
            if row[name]["glued"] >= 0.01:  # to judge by eye: words run together, or long real words?
                row["long_words"] = sorted(set(glued_words(text)))
            if must is not None:
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


def _pages(pages: list[int] | str) -> str:
    text = pages if isinstance(pages, str) else ",".join(map(str, pages))
    return text or "-"


def summary(rows: list[dict]) -> dict:
    done = [r for r in rows if "skipped" not in r]
    out: dict = {"pdfs": len(done), "skipped": sum(1 for r in rows if "skipped" in r)}
    for name in ("pdfminer", "layer", "shipped"):
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
    pages = [p for r in done for p in r["pages"] if p["chars"]]
    kept = [p["garbled"] for p in pages if p["needs_ocr"] != "garbled"]
    out["pages"] = {
        "with_text": len(pages),
        "garbled": sum(1 for p in pages if p["needs_ocr"] == "garbled"),
        "threshold": GARBLED_PAGE_SHARE,
        "max_share_below_threshold": max(kept, default=0.0),
        "min_share_of_garbled": min((p["garbled"] for p in pages if p["needs_ocr"] == "garbled"), default=None),
        "ocred": sum(len(r["ocr_pages"].split(",")) for r in done if r.get("ocr_pages")),
    }
    checks = [r["must_find"] for r in done if "must_find" in r]
    out["must_find"] = f"{sum(checks)}/{len(checks)}"
    return out


def _print_pages(rel: str, pages: list[dict]) -> None:
    for p in pages:
        print(f"    p{p['page']:<4} {p['chars']:>6} chars  garbled {p['garbled']:.3f}  "
              f"{p['needs_ocr'] or 'text'}  {rel}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?")
    ap.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    ap.add_argument("--only", default="", help="only paths containing this substring")
    ap.add_argument("--no-pdfminer", action="store_true", help="skip the (slow) pdfminer column")
    ap.add_argument("--no-ocr", action="store_true", help="convert without OCR (garbled-only PDFs then fail)")
    ap.add_argument("--pages", action="store_true",
                    help="also print every page's characters, garbled share and OCR decision (scans too)")
    args = ap.parse_args()
    corpus = _corpus(args.corpus)
    scanned, must = _expected(corpus)
    ocr = None if args.no_ocr else OcrConfig()
    import markitdown.converters  # noqa: F401 - imported before timing (~3 s)

    if not args.json:
        print(f"{'pdfminer':>8} {'layer':>8} {'shipped':>8}  {'seconds: pdfminer/layer/shipped':>23}  "
              f"garbled pages | OCRed pages | path")
    rows = []
    for path in sorted(corpus.rglob("*")):
        if path.suffix.lower() != ".pdf" or not path.is_file():
            continue
        rel = path.relative_to(corpus).as_posix()
        if args.only not in rel:
            continue
        if rel in scanned:
            rows.append({"path": rel, "skipped": "scanned (EXPECTED.tsv)"})
            if args.pages:
                with contextlib.suppress(Exception):  # the row says skipped already
                    rows[-1]["pages"] = page_rows(pdf_page_texts(path), ocr.min_chars_per_page if ocr else 1)
        else:
            rows.append(measure(path, rel, must.get(rel), not args.no_pdfminer, ocr))
        if args.json:
            continue
        r = rows[-1]
        if "skipped" in r:
            print(f"{'skip':>8} {'':>8} {'':>8}  {'':>23}  {rel}: {r['skipped']}", flush=True)
        else:
            print(f"{_pct(r.get('pdfminer')):>8} {_pct(r.get('layer')):>8} {_pct(r.get('shipped')):>8}  "
                  f"{_sec(r.get('pdfminer')):>7} {_sec(r.get('layer')):>7} {_sec(r.get('shipped')):>7}  "
                  f"{_pages(r['garbled_pages'])} | {_pages(r.get('ocr_pages', ''))} | {rel}"
                  f"{'' if r.get('must_find', True) else '  MUST-FIND MISSING'}"
                  f"{'  (' + r['shipped']['error'] + ')' if 'error' in r.get('shipped', {}) else ''}", flush=True)
        if r.get("long_words"):
            print(f"    its {len(r['long_words'])} distinct words of {GLUED_WORD_LETTERS}+ letters: "
                  f"{', '.join(r['long_words'][:12])}{', ...' if len(r['long_words']) > 12 else ''}", flush=True)
        if args.pages and r.get("pages"):
            _print_pages(rel, r["pages"])
    result = {"rows": rows, "summary": summary(rows)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("glued share: pdfminer / layer / shipped; seconds: pdfminer / layer / shipped")
        print(json.dumps(result["summary"], indent=1))
    shipped = result["summary"].get("shipped", {})
    missing = not all(r.get("must_find", True) for r in rows)
    return 1 if shipped.get("over_1pct") or shipped.get("failed") or missing else 0


if __name__ == "__main__":
    sys.exit(main())
