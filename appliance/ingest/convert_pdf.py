"""PDFs and images -> Markdown: pdfium's text layer page by page, OCR where it has none or it is garbled.

The one place that decides which PDF pages are OCRed (`pdf_page_needs_ocr`), and the text-quality
measures (glued words, unmapped glyphs) those decisions and scripts/pdf_text_report.py rest on.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from appliance.chunks import Converted
from appliance.errors import ConversionFailed, OcrUnavailable, UnsupportedFile
from appliance.ingest.failures import EncryptedDocument, MislabelledFile
from appliance.ingest.formats import sniff
from appliance.ingest.markdown_blocks import PAGE_MARKER
from appliance.ingest.ocr import OCR_ENGINE, OcrConfig, ocr_image_file, ocr_pdf_pages, pdf_page_texts, require_ocr


def _check_pdf(path: Path, head: bytes) -> None:
    if b"%PDF-" not in head[:1024]:
        raise MislabelledFile(f"{path}: a .pdf file must start with %PDF-, but this is {sniff(head)}")


_WORD = re.compile(r"[^\W\d_]+")
GLUED_WORD_LETTERS = 18
"""A run of this many letters is counted as words glued together ("Pleasenotethatyoushould").
Measured with scripts/pdf_text_report.py on the corpus's 76 text PDFs: read by pdfium, every
readable one is under 0.4%; through markitdown (pdfminer/pdfplumber) 15 of them are over 1%,
up to 17.6%."""


def word_counts(text: str) -> tuple[int, int]:
    """(words, glued words) of `text`; a word is a run of letters."""
    words = glued = 0
    for m in _WORD.finditer(text):
        words += 1
        if m.end() - m.start() >= GLUED_WORD_LETTERS:
            glued += 1
    return words, glued


def glued_words(text: str) -> list[str]:
    """The runs of GLUED_WORD_LETTERS or more letters in `text`, in order."""
    return [m.group(0) for m in _WORD.finditer(text) if m.end() - m.start() >= GLUED_WORD_LETTERS]


def glued_share(text: str) -> float:
    """Share of the words of `text` that are 18+ letters long (0.0 for no words)."""
    words, glued = word_counts(text)
    return glued / words if words else 0.0


def paged_markdown(pages: list[str]) -> str:
    """Page texts joined, each after a `<!-- Page number: N -->` line (empty pages keep theirs),
    which the chunker turns into each chunk's page range and keeps out of the chunk text."""
    return "\n\n".join(PAGE_MARKER.format(n=i) + ("\n\n" + t if t.strip() else "")
                       for i, t in enumerate(pages, 1))


_PDFIUM_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]+")
_PDFIUM_DROP = re.compile("[\ufffe\ufeff\u0640]")


def clean_pdfium_text(text: str) -> str:
    """pdfium's page text as plain text.

    Line ends become "\n"; dropped: U+FFFE (pdfium's soft hyphen of a word broken at a line
    end, "ef\ufffeficient") and the Arabic tatweel (U+0640, stretches justified words:
    "المصـــــــر"). Control characters are glyphs of a font without a Unicode map; a space
    glyph among them (one corpus PDF's font shifts every code by 29, so its space is U+0003)
    must stay a word boundary, so each run of them becomes one space.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _PDFIUM_DROP.sub("", text)
    return _PDFIUM_CONTROL.sub(" ", text).strip()


_UNMAPPED_GLYPH = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ue000-\uf8ff\ufffd\uffff\U000f0000-\U0010ffff]")
"""A character pdfium gives for a glyph it has no Unicode meaning for: C0/C1 controls (a font
without a ToUnicode map yields its raw codes), private use, U+FFFD/U+FFFF."""
_WORD_GAP = re.compile(r"[^\S\x0b\x0c\x1c-\x1f\x85]+")
"""Whitespace between words; the control characters Python counts as whitespace are glyphs here."""

GARBLED_PAGE_SHARE = 0.3
"""A PDF page whose text layer has this share of its characters in words holding an unmapped
glyph (`garbled_share`) is read by OCR instead. Measured with scripts/pdf_text_report.py --pages
on all 227 text-bearing pages of the corpus PDFs: the 15 pages of non_ascii_text.pdf (fonts
whose codes are shifted from ASCII, "+HUDXVJHEHU" for "Herausgeber") are at 0.67-0.86; every
other page is at most 0.17: a sidebar in an unmapped font (redp5110_sampled.pdf p3, 0.17), a
Korean page partly in one (skipped_1page.pdf, 0.12), Unicode chart pages whose code points are
drawn in a private-use font (full-width-j.pdf, 0.08-0.10), and all the rest (math, Arabic,
Korean, French, German pages among them) at most 0.011. At 0.3 a page is OCRed once nearly a
third of its text is unreadable, and the worst normal page is far from it."""


def garbled_share(raw: str) -> float:
    """Share of the non-space characters of a page's raw pdfium text (before `clean_pdfium_text`)
    that sit in words holding an unmapped glyph (`_UNMAPPED_GLYPH`); 0.0 for no text.

    Whole words count, not just the unmapped characters: a shifted font keeps most letters
    printable ("+HUDXVJHEHU") and only its spaces, digits and punctuation become controls, so
    every word it writes is unreadable, while a normal page's odd bullet glyph spoils one short word.
    """
    total = bad = 0
    for word in _WORD_GAP.split(raw.replace("\ufffe", "")):
        total += len(word)
        if _UNMAPPED_GLYPH.search(word):
            bad += len(word)
    return bad / total if total else 0.0


PageNeed = Literal["", "scan", "garbled"]


def pdf_page_needs_ocr(raw: str, min_chars: int) -> PageNeed:
    """Whether a PDF page is OCRed instead of read from its text layer, and why; the one place
    that decides it. `raw` is pdfium's text of the page.

    "scan": fewer than `min_chars` non-space characters of text; "garbled": a text layer of
    unmapped glyphs (`garbled_share` at least GARBLED_PAGE_SHARE); "": its text is used.
    """
    if sum(1 for c in clean_pdfium_text(raw) if not c.isspace()) < min_chars:
        return "scan"
    if garbled_share(raw) >= GARBLED_PAGE_SHARE:
        return "garbled"
    return ""


def _page_list(pages: list[int]) -> str:
    return ",".join(str(i + 1) for i in pages)


def convert_pdf(path: Path, head: bytes, ocr: OcrConfig | None) -> Converted:
    """The text layer as pdfium reads it, page by page; OCR for pages without a usable one.
    `head` (the file's first bytes) must show a PDF.

    pdfium is used instead of markitdown's pdfminer/pdfplumber path: measured on the corpus
    with scripts/pdf_text_report.py, it keeps the word boundaries of PDFs that place words
    without space characters (pdfplumber's 3-point tolerance glued them: up to 100% of a
    page's words), and it is much faster; markitdown's PDF Markdown has no headings, and its
    tables come only from that gluing path.

    Pages `pdf_page_needs_ocr` names are OCRed (metadata "ocr_pages"). Without OCR, a document
    with no usable text at all fails with OcrUnavailable; otherwise the rest is indexed: short
    text layers as they are ("pages_without_text"), garbled ones left out, never indexed as
    garbage ("garbled_pages"); the file listing names both.
    """
    _check_pdf(path, head)
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        raw = pdf_page_texts(path)
    except pdfium.PdfiumError as exc:
        if exc.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            raise EncryptedDocument(f"{path}: the PDF is encrypted with a password") from None
        raise ConversionFailed(f"{path}: damaged PDF ({exc})") from None
    page_texts = [clean_pdfium_text(t) for t in raw]
    metadata = {"pages": str(len(raw)), "text_extractor": "pdfium"}
    needs = [pdf_page_needs_ocr(t, ocr.min_chars_per_page if ocr is not None else 1) for t in raw]
    todo = [i for i, need in enumerate(needs) if need]
    engine = ""
    if todo:
        scans = [i for i in todo if needs[i] == "scan"]
        garbled = [i for i in todo if needs[i] == "garbled"]
        why = "; ".join(
            f"{len(pages)} of {len(raw)} pages {what}"
            for pages, what in ((scans, "are scans without text"),
                                (garbled, "have a garbled text layer (fonts without a Unicode map)"))
            if pages
        )
        try:
            cfg = require_ocr(ocr, f"{path} ({why})")
        except OcrUnavailable:
            for i in garbled:
                page_texts[i] = ""
            if not any(page_texts):
                raise
            # a short real text layer (certificate, title page) is kept as it is
            if scans:
                metadata["pages_without_text"] = _page_list(scans)
            if garbled:
                metadata["garbled_pages"] = _page_list(garbled)
            cfg = None
        if cfg is not None:
            for i, text in ocr_pdf_pages(path, todo, cfg):
                page_texts[i] = text  # at its own page; metadata["ocr_pages"] says which
            metadata["ocr_pages"] = _page_list(todo)
            engine = OCR_ENGINE
    return Converted(markdown=paged_markdown(page_texts), ocr_engine=engine, metadata=metadata)


def pages_left_without_ocr(metadata: dict[str, str]) -> str | None:
    """What a PDF converted while OCR was unavailable lacks, from its metadata, or None."""
    def pages(key: str) -> str:
        return ("pages " if "," in metadata[key] else "page ") + metadata[key]

    parts = []
    if metadata.get("garbled_pages"):
        parts.append(f"{pages('garbled_pages')} not indexed: garbled text layer (fonts without a Unicode map)")
    if metadata.get("pages_without_text"):
        parts.append(f"{pages('pages_without_text')} indexed with only their short text layer")
    if not parts:
        return None
    return "; ".join(parts) + "; OCR was unavailable (install tesseract, then `minirag sync --full` reads them)"


def convert_image(path: Path, ocr: OcrConfig | None) -> Converted:
    if ocr is None:
        raise UnsupportedFile(f"{path}: images are documents only when OCR is switched on")
    cfg = require_ocr(ocr, f"{path}: an image")
    frames = ocr_image_file(path, cfg)
    markdown = frames[0] if len(frames) == 1 else paged_markdown(frames)
    return Converted(
        markdown=markdown, ocr_engine=OCR_ENGINE, metadata={"pages": str(len(frames))}
    )
