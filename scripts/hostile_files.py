#!/usr/bin/env python3
"""Hostile files for the fault suite: bombs, cycles, deep nesting, lies in headers, odd names.

    from scripts.hostile_files import generate
    cases = generate(dest, big=False)      # -> list[Case], files written under dest

    python scripts/hostile_files.py DEST [--big]

Every `Case` names the file (relative to `dest`, as the scan will see it), says what
it attacks and what a correct appliance does with it:

* "error"   - one named per-file error in the sync report (`failed`);
* "skipped" - one entry in the sync report's `skipped` list (e.g. an undecodable name);
* "indexed" - a correct index entry;
* "absent"  - by design not part of the corpus (a FIFO, a link that escapes the root);
* "any"     - an error or an index entry are both correct (e.g. a damaged file that a
  tolerant parser may still read).

Nothing here is large on disk except the single-line text files: compression bombs are
written by streaming a compressor, and "huge" images and zips mostly lie in their headers.
`max_file_size(big)` is the MAX_FILE_SIZE the runner must set: one single-line file sits
exactly at it (and is indexed), the other is one byte over it (and is refused by size).
With `big`, both are 200 MB (200,000,000 and 200,000,001 bytes); without, 8 MiB.
"""
from __future__ import annotations

import io
import json
import os
import struct
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20
BIG_LINE = 200_000_000
SMALL_LINE = 8 * MiB


@dataclass(frozen=True)
class Case:
    name: str
    """Path relative to the generated root (os.fsdecode form for undecodable names)."""
    attack: str
    expect: str
    """error | skipped | indexed | absent | any"""


def max_file_size(big: bool) -> int:
    """The MAX_FILE_SIZE a run over `generate(dest, big=big)` must use."""
    return BIG_LINE if big else SMALL_LINE


# ------------------------------------------------------------------ zip containers

CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    '<Override PartName="/xl/workbook.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
    '<Override PartName="/xl/worksheets/sheet1.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
    "</Types>"
)
DOCX_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
    'officeDocument" Target="word/document.xml"/></Relationships>'
)
W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
DOC_HEAD = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document {W_NS}><w:body>'
DOC_TAIL = "</w:body></w:document>"


def _para(text: str) -> str:
    return f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>"


XLSX_RELS = DOCX_RELS.replace("word/document.xml", "xl/workbook.xml")
WORKBOOK = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
    '<sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
)
WORKBOOK_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
    'worksheet" Target="worksheets/sheet1.xml"/></Relationships>'
)
SHEET_HEAD = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
              '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">')

EPUB_CONTAINER = (
    '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
    '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
    "</rootfiles></container>"
)
EPUB_OPF = (
    '<?xml version="1.0" encoding="UTF-8"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
    'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
    '<dc:identifier id="id">hostile</dc:identifier><dc:title>Hostile book</dc:title></metadata>'
    '<manifest><item id="c1" href="chapter.xhtml" media-type="application/xhtml+xml"/></manifest>'
    '<spine><itemref idref="c1"/></spine></package>'
)
XHTML_HEAD = '<?xml version="1.0" encoding="UTF-8"?><html xmlns="http://www.w3.org/1999/xhtml"><body><p>'
XHTML_TAIL = "</p></body></html>"

Parts = dict[str, "str | bytes | Callable[[], Iterable[bytes]]"]


def _zip(path: Path, parts: Parts, *, level: int = 9) -> None:
    """A zip file; a callable part is streamed through the compressor (for bombs)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as zf:
        for name, data in parts.items():
            if callable(data):
                with zf.open(name, "w", force_zip64=True) as fh:
                    for block in data():
                        fh.write(block)
            else:
                zf.writestr(name, data)


def _filler(head: str, size: int, tail: str, unit: bytes = b" ") -> Callable[[], Iterable[bytes]]:
    """head + `size` bytes of `unit` repeated + tail, in 1 MiB blocks."""
    def gen() -> Iterable[bytes]:
        yield head.encode()
        block = unit * (MiB // len(unit))
        left = size
        while left > 0:
            yield block[:left]
            left -= len(block)
        yield tail.encode()
    return gen


def _docx_parts(document: str | Callable[[], Iterable[bytes]]) -> Parts:
    return {"[Content_Types].xml": CONTENT_TYPES, "_rels/.rels": DOCX_RELS, "word/document.xml": document}


def _xlsx_parts(sheet: str | Callable[[], Iterable[bytes]]) -> Parts:
    return {"[Content_Types].xml": CONTENT_TYPES, "_rels/.rels": XLSX_RELS, "xl/workbook.xml": WORKBOOK,
            "xl/_rels/workbook.xml.rels": WORKBOOK_RELS, "xl/worksheets/sheet1.xml": sheet}


def _epub_parts(chapter: str | Callable[[], Iterable[bytes]]) -> Parts:
    return {"mimetype": "application/epub+zip", "META-INF/container.xml": EPUB_CONTAINER,
            "OEBPS/content.opf": EPUB_OPF, "OEBPS/chapter.xhtml": chapter}


def _pptx_bytes() -> bytes:
    from pptx import Presentation

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Hostile deck"
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def _rewrite_zip(data: bytes, replace: dict[str, Callable[[], Iterable[bytes]]], path: Path) -> None:
    """Copy a zip, streaming new content for some members."""
    with zipfile.ZipFile(io.BytesIO(data)) as src:
        parts: Parts = {n: (replace[n] if n in replace else src.read(n)) for n in src.namelist()}
    _zip(path, parts)


def _lying_sizes(path: Path, parts: Parts, claim: int) -> None:
    """Write a zip, then make every central-directory entry claim `claim` (< 4 GiB) uncompressed bytes."""
    _zip(path, parts)
    raw = bytearray(path.read_bytes())
    pos = 0
    while (pos := raw.find(b"PK\x01\x02", pos)) >= 0:
        struct.pack_into("<I", raw, pos + 24, claim)
        pos += 4
    path.write_bytes(bytes(raw))


def _small_declared_large_data(path: Path, declared: int, real: int) -> None:
    """A docx whose document.xml claims `declared` bytes but inflates to `real` bytes."""
    _zip(path, _docx_parts(_filler(DOC_HEAD + "<w:p><w:r><w:t>", real, "</w:t></w:r></w:p>" + DOC_TAIL)))
    raw = bytearray(path.read_bytes())
    for sig, off in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):
        pos = 0
        while (pos := raw.find(sig, pos)) >= 0:
            name_len = struct.unpack_from("<H", raw, pos + (28 if sig == b"PK\x01\x02" else 26))[0]
            start = pos + (46 if sig == b"PK\x01\x02" else 30)
            if raw[start:start + name_len] == b"word/document.xml":
                if struct.unpack_from("<I", raw, pos + off)[0] != 0xFFFFFFFF:
                    struct.pack_into("<I", raw, pos + off, declared)
                name_len2, extra_len = struct.unpack_from("<HH", raw, pos + (28 if sig == b"PK\x01\x02" else 26))
                extra = start + name_len2
                while extra + 4 <= start + name_len2 + extra_len:
                    tag, size = struct.unpack_from("<HH", raw, extra)
                    if tag == 0x0001:
                        struct.pack_into("<Q", raw, extra + 4, declared)
                    extra += 4 + size
            pos += 4
    path.write_bytes(bytes(raw))


# ------------------------------------------------------------------ PDF

def _pdf(objects: list[bytes], *, root: int = 1, trailer_extra: bytes = b"", xref: bool = True) -> bytes:
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    start = len(out)
    if xref:
        out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
        out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, root, trailer_extra, start)
    return bytes(out)


def _stream(data: bytes, extra: bytes = b"", *, flate: bool = False) -> bytes:
    if flate:
        data = zlib.compress(data, 9)
        extra += b" /Filter /FlateDecode"
    return b"<< /Length %d%s >>\nstream\n" % (len(data), extra) + data + b"\nendstream"


FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
PAGE_TEXT = (b"BT /F1 11 Tf 50 700 Td (The quarterly hostile audit covers ledgers, invoices, shipping manifests "
             b"and the calibration of every flux controller in the plant.) Tj ET")


def _text_pdf(text: bytes = PAGE_TEXT) -> bytes:
    return _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        FONT,
        _stream(text),
    ])


def _pdf_many_pages(pages: int, content: bytes) -> bytes:
    first = 5
    kids = b" ".join(b"%d 0 R" % (first + i) for i in range(pages))
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        FONT,
        _stream(content),
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> " \
           b"/Contents 4 0 R >>"
    objs += [page] * pages
    return _pdf(objs)


def _pdf_flate_bomb(path: Path, size: int) -> None:
    """A page whose content stream is `size` bytes of spaces around a line of text, deflated."""
    comp = zlib.compressobj(9)
    body = bytearray(comp.compress(PAGE_TEXT + b"\n"))
    block = b" " * MiB
    for _ in range(size // MiB):
        body += comp.compress(block)
    body += comp.compress(b"\n" + PAGE_TEXT) + comp.flush()
    stream = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(body) + bytes(body) + b"\nendstream"
    path.write_bytes(_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        FONT,
        stream,
    ]))


# ------------------------------------------------------------------ images

def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png(width: int, height: int, *, bit_depth: int = 8, colour: int = 0, idat: bytes | None = None) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour, 0, 0, 0)
    data = idat if idat is not None else zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", data) + _png_chunk(b"IEND", b"")


def _png_real_bilevel(width: int, height: int) -> bytes:
    """A genuine 1-bit white PNG of width x height, streamed through the compressor."""
    row = b"\x00" + b"\xff" * ((width + 7) // 8)
    comp = zlib.compressobj(9)
    out = bytearray()
    rows_per_block = max(1, MiB // len(row))
    block = row * rows_per_block
    left = height
    while left > 0:
        n = min(left, rows_per_block)
        out += comp.compress(block if n == rows_per_block else row * n)
        left -= n
    out += comp.flush()
    return _png(width, height, bit_depth=1, colour=0, idat=bytes(out))


def _tiff_header_claim(width: int, height: int) -> bytes:
    """A little-endian TIFF whose one IFD claims width x height 8-bit grey, with 16 bytes of strip."""
    entries = [
        (256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
        (273, 4, 1, 8 + 2 + 12 * 9 + 4), (277, 3, 1, 1), (278, 4, 1, height), (279, 4, 1, width * height),
    ]
    ifd = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<HHII", tag, typ, count, value) if typ == 4 else struct.pack("<HHIHH", tag, typ, count, value, 0)
        for tag, typ, count, value in entries) + struct.pack("<I", 0)
    return b"II*\x00" + struct.pack("<I", 8) + ifd + b"\x00" * 16


def _jpeg_header_claim(width: int, height: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (8, 8), 255).save(buf, format="JPEG")
    data = bytearray(buf.getvalue())
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


def _bmp_header_claim(width: int, height: int) -> bytes:
    header = struct.pack("<2sIHHI", b"BM", 54 + 16, 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return header + info + b"\x00" * 16


def _tiff_frames(n: int) -> bytes:
    from PIL import Image

    frames = [Image.new("L", (64, 32), 255) for _ in range(n)]
    buf = io.BytesIO()
    frames[0].save(buf, format="TIFF", save_all=True, append_images=frames[1:])
    return buf.getvalue()


def _png_with_text(size: int) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("L", (size, size), 255)
    draw = ImageDraw.Draw(img)
    draw.text((40, 40), "HOSTILE LARGE SCAN", fill=0)
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=9)
    return buf.getvalue()


# ------------------------------------------------------------------ the set

def _valid_docx() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in _docx_parts(DOC_HEAD + _para("A valid hostile-suite document " * 40) + DOC_TAIL).items():
            zf.writestr(name, data)  # type: ignore[arg-type]
    return buf.getvalue()


def _valid_xlsx() -> bytes:
    buf = io.BytesIO()
    rows = "".join(f'<row r="{r}"><c r="A{r}" t="inlineStr"><is><t>cell {r}</t></is></c></row>' for r in range(1, 200))
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in _xlsx_parts(SHEET_HEAD + f"<sheetData>{rows}</sheetData></worksheet>").items():
            zf.writestr(name, data)  # type: ignore[arg-type]
    return buf.getvalue()


def _valid_epub() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in _epub_parts(XHTML_HEAD + "A chapter of a hostile book. " * 80 + XHTML_TAIL).items():
            zf.writestr(name, data)  # type: ignore[arg-type]
    return buf.getvalue()


def _nested_zip(depth: int, inner: bytes) -> bytes:
    data = inner
    for level in range(depth):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for copy in range(4):
                zf.writestr(f"layer{level}_{copy}.zip", data)
        data = buf.getvalue()
    return data


def _zeros_zip(size: int) -> bytes:
    buf = io.BytesIO()
    with (zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf,
          zf.open("zeros.bin", "w", force_zip64=True) as fh):
        block = b"\x00" * MiB
        for _ in range(size // MiB):
            fh.write(block)
    return buf.getvalue()


def _deep(open_tag: str, close_tag: str, depth: int, middle: str = "deep text") -> str:
    return open_tag * depth + middle + close_tag * depth


def _encrypted_flag(data: bytes) -> bytes:
    """Set the 'encrypted' bit on every entry of a zip (headers only)."""
    raw = bytearray(data)
    for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        pos = 0
        while (pos := raw.find(sig, pos)) >= 0:
            flags = struct.unpack_from("<H", raw, pos + off)[0]
            struct.pack_into("<H", raw, pos + off, flags | 1)
            pos += 4
    return bytes(raw)


def generate(dest: Path, *, big: bool = False) -> list[Case]:
    """Write the hostile set under `dest` (created); return one Case per file."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []

    def add(name: str, attack: str, expect: str, data: bytes | str | None = None) -> Path:
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            path.write_text(data, "utf-8")
        elif data is not None:
            path.write_bytes(data)
        cases.append(Case(name, attack, expect))
        return path

    bomb = 120 * MiB  # over the 50 MiB floor of the ratio check, ~1000:1
    # --- zip containers -------------------------------------------------------------
    _zip(add("zip/bomb_ratio.docx", "document.xml inflates 120 MiB of spaces (~1000:1)", "error"),
         _docx_parts(_filler(DOC_HEAD + "<w:p><w:r><w:t>", bomb, "</w:t></w:r></w:p>" + DOC_TAIL)))
    _zip(add("zip/bomb_ratio.xlsx", "sheet1.xml inflates 120 MiB of spaces", "error"),
         _xlsx_parts(_filler(SHEET_HEAD + "<sheetData>", bomb, "</sheetData></worksheet>")))
    _zip(add("zip/bomb_ratio.epub", "chapter inflates 120 MiB of spaces", "error"),
         _epub_parts(_filler(XHTML_HEAD, bomb, XHTML_TAIL)))
    _rewrite_zip(_pptx_bytes(), {"ppt/slides/slide1.xml": _filler("", bomb, "", b" ")},
                 add("zip/bomb_ratio.pptx", "a slide part inflates 120 MiB of spaces", "error"))
    _lying_sizes(add("zip/claims_4gib.xlsx", "central directory claims ~4 GiB per entry", "error"),
                 _xlsx_parts(SHEET_HEAD + "<sheetData/></worksheet>"), 0xFFFF0000)
    _lying_sizes(add("zip/claims_4gib.epub", "central directory claims ~4 GiB per entry", "error"),
                 _epub_parts(XHTML_HEAD + "x" + XHTML_TAIL), 0xFFFF0000)
    _small_declared_large_data(add("zip/declares_1kb_inflates_300mb.docx",
                                   "document.xml declares 1 KiB but its deflate stream inflates to 300 MiB",
                                   "error"), 1024, 300 * MiB)
    many = {f"m/{i:x}": "" for i in range(60_000)}
    _zip(add("zip/many_entries.docx", "60,000 zip entries beside a valid document", "any"),
         {**_docx_parts(DOC_HEAD + _para("Many entries document body.") + DOC_TAIL), **many}, level=1)
    _zip(add("zip/nested_zips.docx", "a 42.zip-style tree of nested zips of zeros inside a valid docx", "any"),
         {**_docx_parts(DOC_HEAD + _para("Nested archive document body.") + DOC_TAIL),
          "word/embeddings/nested.zip": _nested_zip(4, _zeros_zip(16 * MiB))})
    _zip(add("zip/nested_zips.epub", "nested zip bombs inside an otherwise valid EPUB", "any"),
         {**_epub_parts(XHTML_HEAD + "Nested archive book." + XHTML_TAIL),
          "OEBPS/nested.zip": _nested_zip(4, _zeros_zip(16 * MiB))})
    _zip(add("zip/under_ratio_floor.docx",
             "45 MiB of empty paragraphs: just under the 50 MiB floor of the zip-bomb check", "any"),
         _docx_parts(_filler(DOC_HEAD, 45 * MiB, DOC_TAIL, b"<w:p/>")))
    _zip(add("zip/deep_xml.docx", "document.xml nested 100,000 elements deep", "any"),
         _docx_parts(DOC_HEAD + _deep("<w:sdt><w:sdtContent>", "</w:sdtContent></w:sdt>", 100_000,
                                      _para("deep")) + DOC_TAIL))
    laughs = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
              + "".join(f'<!ENTITY lol{i} "{("&lol%s;" % (i - 1 if i > 1 else "")) * 10}">' for i in range(1, 10))
              + f"]><w:document {W_NS}><w:body>" + _para("&lol9;") + DOC_TAIL)
    _zip(add("zip/billion_laughs.docx", "XML entity expansion (billion laughs) in document.xml", "any"),
         _docx_parts(laughs))
    _zip(add("zip/billion_laughs.xlsx", "XML entity expansion in a worksheet", "any"),
         _xlsx_parts(laughs.replace(f"<w:document {W_NS}><w:body>" + _para("&lol9;") + DOC_TAIL,
                                    SHEET_HEAD.split("?>", 1)[1] + '<sheetData><row r="1"><c r="A1" t="inlineStr">'
                                    "<is><t>&lol9;</t></is></c></row></sheetData></worksheet>")))
    _zip(add("zip/huge_dimension.xlsx", "two cells, A1 and XFD1048576: a 17-billion-cell sheet", "any"),
         _xlsx_parts(SHEET_HEAD + '<dimension ref="A1:XFD1048576"/><sheetData>'
                     '<row r="1"><c r="A1" t="inlineStr"><is><t>top</t></is></c></row>'
                     '<row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>corner</t></is></c></row>'
                     "</sheetData></worksheet>"))
    docx = _valid_docx()
    add("zip/truncated.docx", "a valid DOCX cut in half", "error", docx[: len(docx) // 2])
    xlsx = _valid_xlsx()
    add("zip/truncated.xlsx", "a valid XLSX cut in half", "error", xlsx[: len(xlsx) // 2])
    epub = _valid_epub()
    add("zip/truncated.epub", "a valid EPUB cut in half", "error", epub[: len(epub) // 2])
    add("zip/encrypted_flag.docx", "every entry flagged as encrypted", "error", _encrypted_flag(docx))
    add("zip/not_a_zip.docx", "plain text under a .docx name", "error", "Just text, not a zip container.\n")
    add("zip/empty.xlsx", "a zero-byte .xlsx", "error", b"")

    # --- PDF ---------------------------------------------------------------------
    add("pdf/pages_cycle.pdf", "the page tree's Kids contain the Pages node itself", "any", _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        FONT, _stream(PAGE_TEXT)]))
    add("pdf/mutual_pages.pdf", "two Pages nodes that are each other's kid", "any", _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1000000 >>",
        b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1000000 >>"]))
    add("pdf/self_reference.pdf", "an object whose value is a reference to itself", "any", _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>", b"2 0 R"]))
    add("pdf/recursive_form.pdf", "a form XObject that draws itself (infinite recursion) beside text", "any", _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> "
        b"/XObject << /X1 6 0 R >> >> /Contents 5 0 R >>",
        FONT,
        _stream(PAGE_TEXT + b"\n/X1 Do"),
        _stream(PAGE_TEXT + b"\n/X1 Do", b" /Type /XObject /Subtype /Form /BBox [0 0 612 792] "
                b"/Resources << /Font << /F1 4 0 R >> /XObject << /X1 6 0 R >> >>")]))
    add("pdf/xref_prev_loop.pdf", "the trailer's /Prev points back at the same xref section", "any",
        (lambda raw: raw.replace(b"/Root 1 0 R ", b"/Root 1 0 R /Prev %d " % raw.index(b"xref\n")))(_text_pdf()))
    add("pdf/count_lies.pdf", "the page tree claims 2,147,483,647 pages", "any",
        _text_pdf().replace(b"/Count 1", b"/Count 2147483647"))
    add("pdf/deep_arrays.pdf", "a content stream with arrays nested 100,000 deep", "any", _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        FONT, _stream(PAGE_TEXT + b"\n" + b"[" * 100_000 + b"]" * 100_000 + b" pop\n")]))
    add("pdf/deep_dicts.pdf", "a page dictionary nested 50,000 deep", "any", _pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R /Deep " + b"<< /A " * 50_000 + b"1" + b" >>" * 50_000 + b" >>",
        FONT, _stream(PAGE_TEXT)]))
    add("pdf/pages_10000.pdf", "10,000 pages, each with a line of text (no OCR needed)", "any",
        _pdf_many_pages(10_000, PAGE_TEXT))
    add("pdf/blank_pages_10000.pdf", "10,000 blank pages: every one a candidate for OCR", "any",
        _pdf_many_pages(10_000, b""))
    _pdf_flate_bomb(add("pdf/flate_bomb.pdf", "a content stream that inflates to 512 MiB of spaces", "any"),
                    512 * MiB)
    pdf = _text_pdf()
    add("pdf/truncated.pdf", "a valid PDF cut in half (no xref, no trailer)", "any", pdf[: len(pdf) // 2])
    add("pdf/header_only.pdf", "nothing but %PDF-1.7", "error", b"%PDF-1.7\n")
    add("pdf/huge_mediabox.pdf", "a blank 14,400 x 14,400 pt page (200 x 200 in): OCR rendering bound", "any",
        _text_pdf(b"").replace(b"[0 0 612 792]", b"[0 0 14400 14400]"))
    add("pdf/garbage_xref.pdf", "an xref table of garbage offsets", "any",
        (lambda raw: raw[: raw.index(b"xref\n")] + b"xref\n0 6\n" + b"9999999999 00000 n \n" * 6
         + raw[raw.index(b"trailer"):])(_text_pdf()))
    add("pdf/html_named_pdf.pdf", "an HTML page saved as .pdf", "error", "<html><body>not a pdf</body></html>")

    # --- HTML --------------------------------------------------------------------
    add("html/deep_divs.html", "100,000 nested <div> elements", "any",
        "<html><body>" + _deep("<div>", "</div>", 100_000) + "</body></html>")
    add("html/deep_unclosed.html", "100,000 unclosed <b><i> tags", "any",
        "<html><body>" + "<b><i>" * 100_000 + "text</body></html>")
    add("html/deep_lists.html", "lists nested 100,000 deep", "any",
        "<html><body>" + _deep("<ul><li>", "</li></ul>", 100_000) + "</body></html>")
    add("html/deep_tables.html", "tables nested 20,000 deep", "any",
        "<html><body>" + _deep("<table><tr><td>", "</td></tr></table>", 20_000) + "</body></html>")
    add("html/huge_attribute.html", "one 8 MiB attribute value", "any",
        '<html><body><p title="' + "a" * (8 * MiB) + '">short text</p></body></html>')
    add("html/nul_filled.html", "4 MiB of NUL bytes under .html", "error", b"\x00" * (4 * MiB))
    add("html/meta_charset_lies.html", "declares utf-16 in <meta> but is ASCII (odd length)", "any",
        b'<html><head><meta charset="utf-16"></head><body><p>ascii text body.</p></body></html>\n')
    add("html/unknown_charset.html", "declares an unknown charset", "any",
        b'<html><head><meta charset="x-hostile-9"></head><body><p>text \xff\xfe body</p></body></html>')

    # --- text --------------------------------------------------------------------
    limit = max_file_size(big)
    # At 200 MB the worker's copies (bytes, text, pickle) may pass a small CONVERT_MEMORY_MB: a named error then.
    line = add("text/single_line_at_limit.txt", f"a single line of exactly MAX_FILE_SIZE ({limit}) bytes "
               "(words, then whitespace)", "any" if big else "indexed")
    over = add("text/single_line_over_limit.txt", f"a single line of MAX_FILE_SIZE + 1 ({limit + 1}) bytes",
               "error")
    for path, size in ((line, limit), (over, limit + 1)):
        head = b"Single line hostile file about ERR_HOSTILE_LINE_4242. "
        with open(path, "wb") as fh:
            fh.write(head)
            left = size - len(head)
            block = b" \t" * (MiB // 2)
            while left > 0:
                fh.write(block[:left])
                left -= len(block)
    add("text/nul_filled.txt", "8 MiB of NUL bytes under .txt", "error", b"\x00" * (8 * MiB))
    add("text/nul_filled.md", "NUL bytes under .md", "error", b"\x00" * 65536)
    add("text/nul_filled.json", "NUL bytes under .json", "error", b"\x00" * 65536)
    add("text/nul_in_middle.md", "valid text with one NUL byte in the middle", "error",
        b"# Title\n\nvalid text " * 100 + b"\x00" + b" more text\n" * 100)
    add("text/utf16_bom_then_utf8.txt", "a UTF-16 BOM followed by UTF-8 bytes", "any",
        b"\xff\xfe" + "Тест mixed encodings café\n".encode() * 50)
    add("text/utf8_then_utf16.md", "UTF-8 text followed by UTF-16-LE text", "any",
        "# Mixed\n\nплохой текст\n".encode() * 20 + "UTF sixteen part\n".encode("utf-16-le") * 20)
    add("text/invalid_utf8.md", "invalid UTF-8 sequences (overlong, lone continuation bytes)", "any",
        b"# Broken\n\n" + b"ok \xc0\xaf \x80\x80 \xf8\x88\x80\x80\x80 \xed\xa0\x80 text\n" * 200)
    add("text/lone_surrogates.txt", "UTF-8-encoded lone surrogates (CESU-style)", "any",
        b"surrogate \xed\xa0\x80\xed\xb0\x80 and \xed\xbf\xbf end\n" * 100)
    add("text/utf16_no_bom_odd.txt", "UTF-16-LE without BOM and with an odd byte count", "any",
        "no bom utf sixteen text\n".encode("utf-16-le") * 100 + b"\x41")
    add("text/utf16_lone_surrogates.txt", "UTF-16-LE with a BOM and unpaired surrogates", "any",
        b"\xff\xfe" + ("text " .encode("utf-16-le") + b"\x00\xd8" + b"\x00\xdc\x00\xdc") * 200)
    add("text/utf32_bom_garbage.txt", "a UTF-32 BOM followed by bytes that are not UTF-32", "any",
        b"\xff\xfe\x00\x00" + os.urandom(4099))
    add("text/controls_and_bidi.md", "C0/C1 controls and bidi overrides around the text", "any",
        "# Контроль \u202e\u2066evil\u2069\n\n" + "".join(chr(c) for c in range(1, 32) if c not in (10, 13)) * 20
        + "\u0085\u2028\u2029\ufeff\ufffe\uffff text\n")
    add("text/bom_only.txt", "only a UTF-8 byte-order mark", "indexed", b"\xef\xbb\xbf")
    add("text/empty.md", "a zero-byte Markdown file", "indexed", b"")
    # Structures the chunker must cut; every unit they produce is embedded, so they stay small.
    scale = 1
    add("text/deep_blockquote.md", f"a blockquote nested {20_000 * scale:,} deep", "any",
        ">" * (20_000 * scale) + " deep quote\n")
    add("text/deep_list.md", f"a list indented {300 * scale:,} levels", "any",
        "".join("  " * i + "- item\n" for i in range(300 * scale)))
    add("text/long_heading_chain.md", f"{2_000 * scale:,} headings of every level and no body", "any",
        "".join("#" * (1 + i % 6) + f" H{i}\n" for i in range(2_000 * scale)))
    add("text/many_fences.md", f"{5_000 * scale:,} unbalanced code fences", "any", "```\n~~~~\n" * (2_500 * scale))
    add("text/csv_million_columns.csv", "one row of a million empty columns", "any", "," * 1_000_000 + "\n")
    add("text/csv_quotes_unbalanced.csv", "an opening quote that never closes over 2 MiB", "any",
        'a,b\n"' + "x," * MiB + "\n")
    add("text/notebook_invalid.ipynb", "a notebook that is not JSON", "error", '{"cells": [ {"cell_type": ')
    add("text/notebook_wrong_shape.ipynb", "valid JSON of the wrong shape", "any", json.dumps({"cells": 5}))
    add("text/notebook_deep.ipynb", "JSON arrays nested 100,000 deep", "any", "[" * 100_000 + "]" * 100_000)

    # --- names -------------------------------------------------------------------
    add("names/new\nline.md", "a newline in the file name", "indexed", "# Newline name\n\nText.\n")
    add("names/tab\tand\rcr.md", "a tab and a carriage return in the name", "indexed", "# Tab name\n\nText.\n")
    add("names/" + "л" * 120 + ".md", "a 240-byte name of Cyrillic letters", "indexed", "# Long name\n\nText.\n")
    add("names/evil\u202egpj.md", "a right-to-left override in the name", "indexed", "# RTL name\n\nText.\n")
    add("names/-rf --help.md", "a name that looks like command-line options", "indexed", "# Options\n\nText.\n")
    bad = os.fsdecode(b"names/bad\xff\xfename.md")
    (dest / "names").mkdir(exist_ok=True)
    with open(os.fsencode(dest) + b"/names/bad\xff\xfename.md", "wb") as fh:
        fh.write(b"# Bad bytes\n\nText.\n")
    cases.append(Case(bad, "invalid UTF-8 bytes in the name", "skipped"))

    # --- links and special files -------------------------------------------------
    links = dest / "links"
    links.mkdir(exist_ok=True)
    os.symlink("loop_b.md", links / "loop_a.md")
    os.symlink("loop_a.md", links / "loop_b.md")
    cases += [Case("links/loop_a.md", "symlink loop a -> b -> a", "skipped"),
              Case("links/loop_b.md", "symlink loop b -> a -> b", "skipped")]
    os.symlink("self.md", links / "self.md")
    cases.append(Case("links/self.md", "a symlink to itself", "skipped"))
    os.symlink("/nonexistent/hostile/target.md", links / "dangling.md")
    cases.append(Case("links/dangling.md", "a symlink to nothing", "skipped"))
    os.symlink("/etc/hostname", links / "escape.txt")
    cases.append(Case("links/escape.txt", "a symlink out of the root", "absent"))
    add("links/dir/inside.md", "a file inside a directory that links back to itself", "indexed",
        "# Inside the loop\n\nIndexed once.\n")
    os.symlink("..", links / "dir" / "up")
    os.symlink(".", links / "dir" / "here")
    os.mkfifo(links / "pipe.txt")
    cases.append(Case("links/pipe.txt", "a FIFO named like a text file (opening it would block)", "absent"))

    # --- images ------------------------------------------------------------------
    add("img/claims_30000.png", "PNG header claiming 30,000 x 30,000 pixels", "error", _png(30_000, 30_000))
    add("img/claims_30000.tif", "TIFF header claiming 30,000 x 30,000 pixels", "error",
        _tiff_header_claim(30_000, 30_000))
    add("img/claims_30000.jpg", "JPEG frame header claiming 30,000 x 30,000 pixels", "error",
        _jpeg_header_claim(30_000, 30_000))
    add("img/claims_30000.bmp", "BMP header claiming 30,000 x 30,000 pixels", "error",
        _bmp_header_claim(30_000, 30_000))
    add("img/real_30000.png", "a genuine 30,000 x 30,000 1-bit PNG (110 MiB of pixels, tiny file)", "error",
        _png_real_bilevel(30_000, 30_000))
    add("img/real_9000.png", "a genuine 9,000 x 9,000 grey PNG (81 MP, under the limit) with a line of text",
        "any", _png_with_text(9_000))
    png = _png_with_text(400)
    add("img/truncated.png", "a PNG cut in half", "error", png[: len(png) // 2])
    add("img/zero_size.png", "a PNG header claiming 0 x 0 pixels", "error", _png(0, 0))
    add("img/garbage.webp", "random bytes under .webp", "error", b"RIFF\x00\x00\x00\x00WEBP" + os.urandom(2000))
    add("img/frames_300.tif", "a TIFF of 300 frames (300 OCR runs)", "any", _tiff_frames(300))
    return cases


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--big", action="store_true", help="200 MB single-line files instead of 8 MiB ones")
    args = ap.parse_args(argv)
    cases = generate(args.dest, big=args.big)
    for case in cases:
        print(f"{case.expect:8} {case.name!r}: {case.attack}")
    print(f"{len(cases)} files; run with MAX_FILE_SIZE={max_file_size(args.big)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
