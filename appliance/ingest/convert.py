"""Files and client-held content -> Markdown (`Converted`), in-process.

The converter is chosen from the extension and the bytes are checked against it
first, so a mislabelled file fails with its real nature named instead of being
quietly converted as something else. A file of no listed type is indexed verbatim
when its bytes are text (README, NEWS, .rst, code; gzip-compressed text too).
markitdown's individual converters are called directly (never `convert_uri`, never
content sniffing through Magika: 27 ms a file against a 8 KB read, see
scripts/folder_coverage.py), and text formats are decoded by `textfile` with detected encodings, never assumed UTF-8.

Run `to_markdown` inside `isolate.ConvertPool` for untrusted corpora: it has no
time or memory limit of its own.
"""
from __future__ import annotations

import io
import json
import logging
import re
import warnings
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from appliance.chunks import Converted
from appliance.errors import ConversionFailed, FileTooLarge, OcrUnavailable, UnsupportedFile
from appliance.ingest import markup
from appliance.ingest.failures import BinaryContent, EncryptedDocument, MislabelledFile
from appliance.ingest.formats import (
    BINARY_EXTENSIONS,
    COMPRESSED_TEXT,
    IMAGE_EXTENSIONS,
    SNIFF_BYTES,
    SUPPORTED_EXTENSIONS,
    TEXT_EXTENSIONS,
    accepted_extensions,
    binary_reason,
    inner_name,
)
from appliance.ingest.markdown_blocks import PAGE_MARKER, SHEET_MARKER, code_lines, front_matter_lines
from appliance.ingest.ocr import (
    OCR_ENGINE,
    OcrConfig,
    ocr_image_file,
    ocr_pdf_pages,
    pdf_page_texts,
    require_ocr,
)
from appliance.ingest.sheets import tidy_workbook
from appliance.ingest.textfile import read_text
from appliance.ingest.titles import choose_title

if TYPE_CHECKING:
    from markitdown import DocumentConverter, DocumentConverterResult, StreamInfo

# The converters' libraries warn about what a document holds that they skip (openpyxl: "Unknown
# extension is not supported", pdfminer: font and colour-space notes), once per file, on stderr:
# over a corpus that buried the sync's own lines. What matters reaches the report as a failure.
warnings.filterwarnings("ignore", category=UserWarning, module=r"(openpyxl|pdfminer|xlrd|docx|pptx)(\.|$)")
for _noisy in ("pdfminer", "openpyxl", "markitdown"):
    logging.getLogger(_noisy).setLevel(logging.ERROR)

_ZIP_FORMATS = {".docx", ".pptx", ".xlsx", ".epub"}
_METADATA_TITLE_FORMATS = {".html", ".htm", ".epub"}

# Uncompressed size a zip container may claim before it is treated as a zip bomb.
ZIP_MAX_UNCOMPRESSED = 1 << 30
ZIP_MAX_RATIO = 200
CSV_MAX_COLUMNS = 16_384
"""A spreadsheet's column limit (XFD). Each CSV cell becomes `| x ` in the Markdown table and the
separator row adds `| --- ` per column: a 1 MB row of a million empty cells turned into 9 MB of
Markdown and 20,000 retrieval units (40 minutes of embedding) before this limit."""


# ---------------------------------------------------------------- names and sizes

def check_name(path: Path) -> None:
    """Refuse dot-files and Office lock files (`~$name.docx`) by name."""
    name = path.name
    if name.startswith("~$"):
        raise UnsupportedFile(
            f"{path}: an Office lock file (~$...), not a document",
            hint="Lock files exist while a document is open; they hold no content.",
        )
    if name.startswith("."):
        raise UnsupportedFile(f"{path}: hidden file (name starts with a dot) is not ingested")


def check_size(path: Path, max_file_size: int) -> int:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ConversionFailed(f"{path}: file not found") from None
    if max_file_size and size > max_file_size:
        raise FileTooLarge(f"{path}: {size} bytes exceeds MAX_FILE_SIZE ({max_file_size} bytes)")
    return size


# ---------------------------------------------------------------- post-processing

_DATA_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(\s*<?data:[^)\n]*\)")


def strip_data_images(markdown: str) -> str:
    """Replace inline `![alt](data:...)` pictures by their alt text, outside fenced code.

    Image links to paths or URLs are references and stay as written.
    """
    if "data:" not in markdown:
        return markdown
    lines = markdown.split("\n")
    code = iter([*code_lines(markdown), (len(lines), len(lines))])
    first, last = next(code)
    for i, line in enumerate(lines):
        if i > last:
            first, last = next(code)
        if i < first and "data:" in line:
            lines[i] = _DATA_IMAGE.sub(lambda mm: mm.group(1).strip(), line)
    return "\n".join(lines)


def _tidy(markdown: str) -> str:
    """What markitdown does after converting: strip line ends, at most one blank line."""
    text = "\n".join(line.rstrip() for line in re.split(r"\r?\n", markdown))
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def front_matter(markdown: str) -> dict[str, str]:
    """`type` and `tags` from a YAML front-matter block, as raw strings (tags comma-joined).

    A small reader for the shapes people write (`tags: [a, b]`, `tags: a, b`, a `- item`
    list); the block itself stays in the text.
    """
    span = front_matter_lines(markdown)
    if span is None:
        return {}
    meta: dict[str, str] = {}
    lines = markdown.split("\n")[span[0] + 1:span[1]]
    i = 0
    while i < len(lines):
        line = lines[i]
        km = re.match(r"^(type|tags)\s*:\s*(.*?)\s*$", line, re.I)
        i += 1
        if not km:
            continue
        key, value = km.group(1).lower(), km.group(2)
        if key == "tags":
            items: list[str] = []
            if value.startswith("[") and value.endswith("]"):
                items = value[1:-1].split(",")
            elif value:
                items = value.split(",")
            else:
                while i < len(lines) and re.match(r"^\s*-\s*", lines[i]):
                    items.append(re.sub(r"^\s*-\s*", "", lines[i]))
                    i += 1
            cleaned = [v.strip().strip("'\"").strip() for v in items]
            value = ",".join(v for v in cleaned if v)
        else:
            value = value.strip().strip("'\"")
        if value:
            meta[key] = value
    return meta


# ---------------------------------------------------------------- sniffing

def _sniff(head: bytes) -> str:
    """A short name for what the first bytes look like, for error messages."""
    h = head.lstrip()[:512].lower()
    if head.startswith(b"%PDF-"):
        return "a PDF"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "a zip archive"
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return "an OLE2 (legacy Office) file"
    if h.startswith(b"<!doctype html") or h.startswith(b"<html") or b"<html" in h[:256]:
        return "an HTML page"
    if h.startswith(b"<?xml") or h.startswith(b"<"):
        return "XML or HTML markup"
    if head.startswith((b"\x89PNG", b"\xff\xd8\xff", b"GIF8")):
        return "an image"
    if b"\x00" in head[:512]:
        return "binary data"
    return "text"


def _check_zip(path: Path, head: bytes, ext: str) -> None:
    if not head.startswith(b"PK"):
        raise MislabelledFile(f"{path}: a {ext} file must be a zip container, but this is {_sniff(head)}")
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except zipfile.BadZipFile as exc:
        raise ConversionFailed(f"{path}: damaged {ext} (zip container unreadable: {exc})") from None
    total = sum(i.file_size for i in infos)
    packed = sum(i.compress_size for i in infos) or 1
    if total > ZIP_MAX_UNCOMPRESSED or (total > 50 * (1 << 20) and total / packed > ZIP_MAX_RATIO):
        raise ConversionFailed(
            f"{path}: refused as a zip bomb: {total} bytes uncompressed from {packed} "
            f"(ratio {total / packed:.0f}:1)",
            hint="A legitimate document this compressible is very unusual; exclude the file.",
        )


def _check_csv_width(path: Path, text: str) -> None:
    import csv

    try:
        for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
            if len(row) > CSV_MAX_COLUMNS:
                raise ConversionFailed(
                    f"{path}: row {n} has {len(row)} columns; more than {CSV_MAX_COLUMNS} "
                    "(a spreadsheet's limit) are refused",
                    hint="A table this wide cannot be searched as text; split it or exclude the file.",
                )
    except csv.Error:
        pass  # the converter reports the damage itself


def _check_pdf(path: Path, head: bytes) -> None:
    if b"%PDF-" not in head[:1024]:
        raise MislabelledFile(f"{path}: a .pdf file must start with %PDF-, but this is {_sniff(head)}")


def _check_xls(path: Path, head: bytes) -> str:
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return ".xls"
    if head.startswith(b"PK"):
        return ".xlsx"  # an .xlsx saved under the old extension converts fine as what it is
    raise MislabelledFile(f"{path}: a .xls file must be an OLE2 workbook, but this is {_sniff(head)}")


# ---------------------------------------------------------------- glued words

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


# ---------------------------------------------------------------- markitdown calls

def _run(converter: DocumentConverter, data: BinaryIO, ext: str, charset: str | None = None,
         **kw: Any) -> DocumentConverterResult:
    from markitdown import StreamInfo

    info = StreamInfo(extension=ext, charset=charset)
    return converter.convert(data, info, **kw)


def _failed(path: Path, ext: str, exc: BaseException) -> ConversionFailed:
    if isinstance(exc, MemoryError):
        return ConversionFailed(f"{path}: ran out of memory converting {ext}")
    msg = str(exc).strip().splitlines()
    reason = msg[-1] if msg else type(exc).__name__
    if len(reason) > 300:
        reason = reason[:300] + "..."
    return ConversionFailed(f"{path}: could not convert {ext}: {type(exc).__name__}: {reason}")


_EMPTY_EMPHASIS = re.compile(r"<(strong|b|em|i|u|s|del)\b[^>]*>(\s+)</\1>", re.I)


def keep_emphasised_spaces(html: str) -> str:
    """`<strong> </strong>` -> ` `: markdownify drops whitespace-only emphasis and glues words.

    Word documents often carry the space between two words as a separately formatted run.
    """
    return _EMPTY_EMPHASIS.sub(lambda m: m.group(2), html)


def _docx_converter() -> DocumentConverter:
    """markitdown's DOCX path, with pictures reduced to their alt text before mammoth reads them.

    mammoth's default inlines every picture as base64 (which we would strip again) and
    fails on pictures linked by URL (KeyError 'word/https://...'); here it never opens them.
    """
    import mammoth
    import mammoth.images
    from markitdown.converter_utils.docx.pre_process import pre_process_docx
    from markitdown.converters import DocxConverter, _docx_converter as md_docx

    def alt_only(image: Any) -> dict[str, str]:  # a mammoth.documents.Image (mammoth has no type hints)
        return {"src": "data:,", "alt": (image.alt_text or "").replace("\n", " ")}

    class _Docx(DocxConverter):
        def convert(self, file_stream: BinaryIO, stream_info: StreamInfo, **kwargs: Any) -> DocumentConverterResult:
            stream = pre_process_docx(file_stream)
            style_map = "\n".join(
                part
                for part in (md_docx._read_embedded_style_map(stream), md_docx._UNDERLINE_STYLE_MAP)
                if part
            )
            html = mammoth.convert_to_html(
                stream,
                style_map=style_map,
                include_embedded_style_map=False,
                convert_image=mammoth.images.img_element(alt_only),
            ).value
            return self._html_converter.convert_string(keep_emphasised_spaces(html), **kwargs)

    return _Docx()  # type: ignore[no-untyped-call]  # DocxConverter.__init__ (markitdown) has no annotations


def _pptx_plain(path: Path) -> str:
    """Slide text read with python-pptx alone, for decks markitdown's converter gives up on
    (e.g. a shape type python-pptx does not recognise). Same slide markers as markitdown."""
    from pptx import Presentation

    def texts(shapes: Iterable[Any]) -> list[str]:  # python-pptx shapes of every kind, duck-typed as below
        out: list[str] = []
        for shape in shapes:
            try:
                if getattr(shape, "has_text_frame", False) and shape.text_frame.text.strip():
                    out.append(shape.text_frame.text.strip())
                elif getattr(shape, "has_table", False):
                    for row in shape.table.rows:
                        out.append("| " + " | ".join(c.text.strip() for c in row.cells) + " |")
                elif hasattr(shape, "shapes"):
                    out.extend(texts(shape.shapes))
            except (NotImplementedError, AttributeError, KeyError, ValueError):
                continue
        return out

    parts = []
    for n, slide in enumerate(Presentation(str(path)).slides, 1):
        parts.append(f"<!-- Slide number: {n} -->\n" + "\n\n".join(texts(slide.shapes)))
    return "\n\n".join(parts)


def _html_charset(data: bytes) -> str:
    from appliance.ingest.textfile import detect_encoding

    if not data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")) and b"\x00" not in data[:4096]:
        m = re.search(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", data[:4096], re.I)
        if m:
            name = m.group(1).decode("ascii", "ignore").lower()
            try:
                import codecs

                # A <meta> naming UTF-16/32 in a page without NUL bytes is a lie (the HTML
                # standard reads it as UTF-8): decoding ASCII as UTF-16 gives CJK garbage.
                if not codecs.lookup(name).name.startswith(("utf-16", "utf-32")):
                    data.decode(name)
                    return name
            except (LookupError, UnicodeDecodeError):
                pass
    enc, _ = detect_encoding(data)
    return enc


def _convert_html_bytes(data: bytes, path: Path | None) -> tuple[str, str | None]:
    from markitdown import StreamInfo
    from markitdown.converters import BingSerpConverter, HtmlConverter, WikipediaConverter

    charset = _html_charset(data)
    text = keep_emphasised_spaces(data.decode(charset, errors="replace").lstrip("\ufeff"))
    raw = text.encode("utf-8")
    # A saved MediaWiki page: take the article, not the navigation around it.
    if b'id="mw-content-text"' in raw:
        res = _run(WikipediaConverter(), io.BytesIO(raw), ".html", "utf-8")
    elif b'id="b_results"' in raw and b"b_algo" in raw:
        # A saved Bing results page: keep the results, decode Bing's redirect links.
        from urllib.parse import quote

        m = re.search(r"""<input[^>]*\bname=["']q["'][^>]*\bvalue=["']([^"']*)""", text) or re.search(
            r"<title>(.*?)(?: - Search)?</title>", text, re.S
        )
        query = m.group(1).strip() if m else ""
        info = StreamInfo(extension=".html", charset="utf-8", url="https://www.bing.com/search?q=" + quote(query))
        res = BingSerpConverter().convert(io.BytesIO(raw), info)
    else:
        res = _run(HtmlConverter(), io.BytesIO(raw), ".html", "utf-8")
    return res.markdown, res.title


def paged_markdown(pages: list[str]) -> str:
    """Page texts joined, each after a `<!-- Page number: N -->` line (empty pages keep theirs),
    which the chunker turns into each chunk's page range and keeps out of the chunk text."""
    return "\n\n".join(PAGE_MARKER.format(n=i) + ("\n\n" + t if t.strip() else "")
                       for i, t in enumerate(pages, 1))


_SHEET_HEADING = re.compile(r"^## (.+)$", re.M)


def mark_sheets(markdown: str) -> str:
    """markitdown's workbook Markdown (a `## SheetName` heading, then its table, per sheet), tidied
    (`sheets.tidy_workbook`: no `Unnamed`/`NaN`, the real header row), with a `<!-- Sheet name: X -->`
    line before each heading, for the chunker's sheet field. Table rows start with "|", so every
    such heading at a line start is a sheet's."""
    def mark(m: re.Match[str]) -> str:
        name = " ".join(m.group(1).replace("--", "- -").split())
        return SHEET_MARKER.format(name=name) + "\n" + m.group(0)

    return _SHEET_HEADING.sub(mark, tidy_workbook(markdown))


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


def _convert_pdf(path: Path, ocr: OcrConfig | None) -> Converted:
    """The text layer as pdfium reads it, page by page; OCR for pages without a usable one.

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


def _convert_image(path: Path, ocr: OcrConfig | None) -> Converted:
    if ocr is None:
        raise UnsupportedFile(f"{path}: images are documents only when OCR is switched on")
    cfg = require_ocr(ocr, f"{path}: an image")
    frames = ocr_image_file(path, cfg)
    markdown = frames[0] if len(frames) == 1 else paged_markdown(frames)
    return Converted(
        markdown=markdown, ocr_engine=OCR_ENGINE, metadata={"pages": str(len(frames))}
    )


def _convert_file(path: Path, ext: str, ocr: OcrConfig | None) -> tuple[Converted, str | None]:
    """Returns the conversion and the converter's metadata title (HTML/EPUB)."""
    if ext in IMAGE_EXTENSIONS:
        return _convert_image(path, ocr), None

    with open(path, "rb") as fh:
        head = fh.read(4096)

    if ext in TEXT_EXTENSIONS or ext == ".json":
        text, enc = read_text(path)
        text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
        meta = {"encoding": enc}
        if ext in (".md", ".markdown"):
            meta.update(front_matter(text))
        return Converted(markdown=strip_data_images(text), has_lines=True, metadata=meta), None

    if ext == ".pdf":
        _check_pdf(path, head)
        return _convert_pdf(path, ocr), None

    if ext in _ZIP_FORMATS:
        _check_zip(path, head, ext)
    from markitdown import converters as mc  # imported only when a format needs it (~3 s)

    try:
        if ext in (".html", ".htm"):
            data = path.read_bytes()
            if b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
                from appliance.ingest.textfile import detect_encoding

                try:
                    detect_encoding(data)  # raises BinaryContent unless UTF-16 without BOM
                except BinaryContent as exc:
                    raise BinaryContent(f"{path}: {exc}") from None
            md, title = _convert_html_bytes(data, path)
            return Converted(markdown=md), title
        if ext in (".csv", ".ipynb"):
            text, enc = read_text(path)
            if ext == ".csv":
                _check_csv_width(path, text)
            conv: DocumentConverter = mc.CsvConverter() if ext == ".csv" else mc.IpynbConverter()
            if ext == ".ipynb":
                try:
                    json.loads(text)
                except ValueError as exc:
                    raise MislabelledFile(f"{path}: a notebook must be JSON ({exc})") from None
            res = _run(conv, io.BytesIO(text.lstrip("\ufeff").encode("utf-8")), ext, "utf-8")
            return Converted(markdown=res.markdown, metadata={"encoding": enc}), None
        if ext == ".xls":
            real = _check_xls(path, head)
            if real == ".xlsx":
                _check_zip(path, head, ".xlsx")
            conv = mc.XlsConverter() if real == ".xls" else mc.XlsxConverter()
            with open(path, "rb") as fh:
                res = _run(conv, fh, real)
            return Converted(markdown=mark_sheets(res.markdown)), None
        makers: dict[str, Callable[[], DocumentConverter]] = {
            ".docx": _docx_converter,
            ".pptx": mc.PptxConverter,
            ".xlsx": mc.XlsxConverter,
            ".epub": mc.EpubConverter,
        }
        conv = makers[ext]()
        try:
            with open(path, "rb") as fh:
                res = _run(conv, fh, ext)
        except (NotImplementedError, AttributeError, KeyError, TypeError) as exc:
            if ext != ".pptx":
                raise
            return Converted(
                markdown=_pptx_plain(path),
                metadata={"text_extractor": f"python-pptx (markitdown failed: {type(exc).__name__})"},
            ), None
        markdown = mark_sheets(res.markdown) if ext == ".xlsx" else res.markdown
        return Converted(markdown=markdown), res.title if ext in _METADATA_TITLE_FORMATS else None
    except (ConversionFailed, UnsupportedFile, MemoryError):
        raise  # MemoryError: the worker reports it as the memory limit and is replaced
    except Exception as exc:  # noqa: BLE001 - third-party parsers raise anything
        from markitdown import MissingDependencyException

        if isinstance(exc, MissingDependencyException):
            raise ConversionFailed(
                f"{path}: the {ext} converter is not installed ({str(exc).splitlines()[0]})",
                hint="Install the package named in the message (for .xls: xlrd).",
            ) from None
        raise _failed(path, ext, exc) from None


# ---------------------------------------------------------------- text recognised by content

def _read_unlisted(path: Path, max_file_size: int) -> bytes:
    """The bytes of a file of no listed type; a .gz file's decompressed, read as a stream and
    never more than MAX_FILE_SIZE of them (a decompression bomb stops there)."""
    if path.suffix.lower() != COMPRESSED_TEXT:
        return path.read_bytes()
    import gzip
    import zlib

    inner = Path(inner_name(path.name)).suffix.lower()
    if inner in SUPPORTED_EXTENSIONS - TEXT_EXTENSIONS - {".json", ".csv"} or inner in IMAGE_EXTENSIONS:
        raise UnsupportedFile(f"{path}: compressed {inner}: only compressed text is indexed",
                              hint="Decompress the file to index it.")
    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read(max_file_size + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise ConversionFailed(f"{path}: damaged gzip file ({exc})") from None
    if len(data) > max_file_size:
        raise FileTooLarge(f"{path}: decompresses to more than MAX_FILE_SIZE ({max_file_size} bytes)")
    return data


def _convert_unlisted(path: Path, max_file_size: int) -> tuple[Converted, str | None]:
    """A file of no listed type that holds text (README, NEWS, copyright, .rst, code, changelog.gz),
    kept verbatim with its syntax (markup.syntax_of) for the chunker. Its title: the first heading
    that is not boilerplate, else its folder and name ("bash/copyright": such names say little alone)."""
    from appliance.ingest.textfile import decode_text
    from appliance.ingest.titles import is_boilerplate_heading

    data = _read_unlisted(path, max_file_size)
    why = binary_reason(data[:SNIFF_BYTES])
    if why:
        raise UnsupportedFile(f"{path}: {why}: only text is indexed from a file of no listed type",
                              hint="README lists the formats indexed; exclude the file to silence this.")
    try:
        text, enc = decode_text(data)
    except BinaryContent as exc:
        raise BinaryContent(f"{path}: {exc}") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    name = inner_name(path.name)
    syntax = markup.syntax_of(name, text)
    meta = {"encoding": enc, "syntax": syntax}
    if name != path.name:
        meta["compression"] = "gzip"
    if syntax == "markdown":
        meta.update(front_matter(text))
        return Converted(markdown=strip_data_images(text), has_lines=True, metadata=meta), None
    heading = markup.first_heading(text, syntax)
    title = heading if heading and not is_boilerplate_heading(heading) else f"{path.parent.name}/{name}"
    return Converted(markdown=text, has_lines=True, metadata=meta), title


# ---------------------------------------------------------------- public API

def load_converters() -> None:
    """Import markitdown's converters now (a worker does so before its memory limit applies)."""
    import markitdown.converters  # noqa: F401 - imported for its side effect: loading the parsers


def to_markdown(path: Path, *, ocr: OcrConfig | None, max_file_size: int) -> Converted:
    """Convert one file to Markdown with its title; raises ApplianceError subclasses."""
    path = Path(path)
    check_name(path)
    ext = path.suffix.lower()
    listed = ext in SUPPORTED_EXTENSIONS or ext in IMAGE_EXTENSIONS
    if not listed and (ext in BINARY_EXTENSIONS or ext in IMAGE_EXTENSIONS):
        raise UnsupportedFile(f"{path}: extension {ext} is not a supported format")
    check_size(path, max_file_size)
    if not path.is_file():
        raise ConversionFailed(f"{path}: not a regular file")
    try:
        conv, meta_title = _convert_file(path, ext, ocr) if listed else _convert_unlisted(path, max_file_size)
    except RecursionError:
        raise ConversionFailed(f"{path}: document nesting too deep to convert") from None
    markdown = conv.markdown if conv.has_lines else _tidy(strip_data_images(conv.markdown))
    title = choose_title(metadata_title=meta_title, markdown=markdown, path=path)
    return Converted(
        markdown=markdown,
        title=title,
        ocr_engine=conv.ocr_engine,
        has_lines=conv.has_lines,
        metadata=dict(conv.metadata),
    )


def convert_data(
    content: str, fmt: str, *, title: str | None = None
) -> Converted:
    """Convert content a client hands over (ingest_data): `fmt` is text, markdown or html (InvalidArgument
    otherwise). Title only if given or in the content."""
    meta_title: str | None = None
    metadata: dict[str, str] = {}
    has_lines = False
    if fmt == "html":
        markdown, meta_title = _convert_html_bytes(content.encode("utf-8"), None)
        markdown = _tidy(strip_data_images(markdown))
    elif fmt == "markdown":
        markdown = strip_data_images(content.replace("\r\n", "\n"))
        metadata.update(front_matter(markdown))
        has_lines = True
    elif fmt == "text":
        markdown = content.replace("\r\n", "\n")
        has_lines = True
    else:
        from appliance.errors import InvalidArgument

        raise InvalidArgument(f"format must be text, markdown or html, not {fmt!r}")
    if "\x00" in markdown:
        from appliance.ingest.failures import BinaryContent

        raise BinaryContent("content contains NUL characters: binary data, not text")
    if title is not None and title.strip():
        chosen: str | None = re.sub(r"\s+", " ", title).strip()
    elif fmt == "text":
        chosen = None
    else:
        chosen = choose_title(metadata_title=meta_title, markdown=markdown, path=None)
    return Converted(markdown=markdown, title=chosen, has_lines=has_lines, metadata=metadata)


__all__ = [
    "IMAGE_EXTENSIONS",
    "SUPPORTED_EXTENSIONS",
    "TEXT_EXTENSIONS",
    "OcrConfig",
    "accepted_extensions",
    "check_name",
    "check_size",
    "convert_data",
    "front_matter",
    "strip_data_images",
    "to_markdown",
]
