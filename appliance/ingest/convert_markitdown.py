"""Office documents, HTML, EPUB, CSV, notebooks and workbooks -> Markdown through markitdown.

markitdown's individual converters are called directly (never `convert_uri`, never content
sniffing through Magika: 27 ms a file against a 8 KB read, see scripts/folder_coverage.py),
after the bytes are checked against the extension (zip containers, zip bombs, CSV width).
The only module that imports markitdown: it costs ~3 s, so every import of it is deferred.
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
from typing import TYPE_CHECKING, Any, BinaryIO

from appliance.chunks import Converted
from appliance.errors import ConversionFailed, UnsupportedFile
from appliance.ingest.failures import BinaryContent, MislabelledFile
from appliance.ingest.formats import sniff
from appliance.ingest.markdown_blocks import SHEET_MARKER
from appliance.ingest.sheets import tidy_workbook
from appliance.ingest.textfile import read_text

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


def _check_zip(path: Path, head: bytes, ext: str) -> None:
    if not head.startswith(b"PK"):
        raise MislabelledFile(f"{path}: a {ext} file must be a zip container, but this is {sniff(head)}")
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


def _check_xls(path: Path, head: bytes) -> str:
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return ".xls"
    if head.startswith(b"PK"):
        return ".xlsx"  # an .xlsx saved under the old extension converts fine as what it is
    raise MislabelledFile(f"{path}: a .xls file must be an OLE2 workbook, but this is {sniff(head)}")


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


def html_to_markdown(data: bytes, path: Path | None) -> tuple[str, str | None]:
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


def convert_with_markitdown(path: Path, ext: str, head: bytes) -> tuple[Converted, str | None]:
    """Returns the conversion and the converter's metadata title (HTML/EPUB); `head`: the file's first bytes."""
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
            md, title = html_to_markdown(data, path)
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


def load_converters() -> None:
    """Import markitdown's converters now (a worker does so before its memory limit applies)."""
    import markitdown.converters  # noqa: F401 - imported for its side effect: loading the parsers
