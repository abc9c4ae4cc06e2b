"""Which files are documents: the extensions a scan picks up, without importing any converter."""
from __future__ import annotations

from pathlib import Path

from appliance.config import Settings
from appliance.ingest.ocr import OcrConfig, ocr_status

TEXT_EXTENSIONS: frozenset[str] = frozenset({".md", ".markdown", ".txt"})
"""Kept verbatim: line N of the Markdown is line N of the file (`has_lines`)."""

SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(
    {
        ".md", ".markdown", ".txt", ".pdf", ".docx", ".pptx", ".xlsx", ".xls",
        ".html", ".htm", ".csv", ".epub", ".ipynb", ".json",
    }
)
IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {".png", ".jpg", ".jpeg", ".tiff", ".tif", ".bmp", ".webp"}
)
"""Become documents through OCR; a scanner should list them only when OCR is available."""


def accepted_extensions(ocr: OcrConfig | None) -> frozenset[str]:
    """Extensions a scan should pick up: images only when OCR is configured and installed."""
    if ocr is not None and ocr_status(ocr)[1] is None:
        return SUPPORTED_EXTENSIONS | IMAGE_EXTENSIONS
    return SUPPORTED_EXTENSIONS


def ocr_config(settings: Settings) -> OcrConfig:
    return OcrConfig(languages=settings.ocr_languages, min_chars_per_page=settings.ocr_min_chars_per_page)


def extensions(settings: Settings) -> frozenset[str]:
    """What a sync under these settings picks up (asks tesseract once per process)."""
    return accepted_extensions(ocr_config(settings))


# ---------------------------------------------------------------- files recognised by content

SNIFF_BYTES = 8192
"""How much of a file (after decompression, for .gz) decides text or binary: git's own rule
looks at the first 8,000 bytes for a NUL."""
COMPRESSED_TEXT = ".gz"
"""Text compressed with gzip (`changelog.Debian.gz`, `NEWS.gz`) is indexed as the text it holds."""
BINARY_EXTENSIONS: frozenset[str] = frozenset(
    {
        ".zip", ".tar", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".rar", ".lz", ".lzma", ".z",
        ".deb", ".rpm", ".jar", ".war", ".whl", ".egg", ".apk", ".iso", ".img", ".dmg",
        ".exe", ".dll", ".so", ".o", ".a", ".dylib", ".bin", ".class", ".pyc", ".pyo", ".wasm",
        ".gif", ".ico", ".icns", ".svgz", ".psd", ".xcf", ".heic", ".avif", ".jp2",
        ".mp3", ".mp4", ".m4a", ".ogg", ".oga", ".ogv", ".wav", ".flac", ".avi", ".mkv", ".mov", ".webm",
        ".ttf", ".otf", ".woff", ".woff2", ".eot", ".pfb",
        ".db", ".sqlite", ".sqlite3", ".mdb", ".lance", ".parquet", ".arrow", ".npy", ".npz", ".pkl",
        ".onnx", ".pt", ".safetensors", ".gguf", ".doc", ".ppt", ".odt", ".ods", ".odp", ".rtfd",
        ".rtf", ".ps", ".eps", ".svg",
    }
)
"""Extensions never indexed as text, left out without opening the file: binary formats (images
too, without OCR), and text that is a program's markup more than words (RTF, PostScript, SVG)."""
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF"), (b"PK\x03\x04", "a zip archive"), (b"PK\x05\x06", "a zip archive"),
    (b"\x89PNG", "a PNG image"), (b"GIF8", "a GIF image"), (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x7fELF", "a program (ELF)"), (b"BZh", "bzip2 data"), (b"\xfd7zXZ", "xz data"),
    (b"7z\xbc\xaf", "a 7-Zip archive"), (b"\x28\xb5\x2f\xfd", "zstd data"), (b"OggS", "Ogg media"),
    (b"RIFF", "RIFF media"), (b"ID3", "MP3 audio"), (b"\xd0\xcf\x11\xe0", "an OLE2 (legacy Office) file"),
    (b"wOFF", "a web font"), (b"SQLite format 3", "an SQLite database"),
)
_CONTROL = frozenset(range(32)) - frozenset(b"\t\n\r\f\v\x1b\x08\x07") | {0x7F}
_CONTROL_SHARE = 0.01
"""More control bytes than this share of the sample (besides tab, line ends, form feed, escape,
backspace, bell: what man pages, logs and old READMEs hold) is binary data."""


def binary_reason(head: bytes) -> str | None:
    """Why the first bytes of a file are not text, or None when they read as text (an empty file is
    text). UTF-16/32 with a BOM or in the NUL pattern textfile recognises counts as text."""
    from appliance.ingest.textfile import _bom, _utf16_without_bom

    if not head or _bom(head):
        return None
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return f"binary content ({what})"
    if b"\x00" in head:
        return None if _utf16_without_bom(head) else "binary content (NUL bytes)"
    controls = sum(1 for byte in head if byte in _CONTROL)
    if controls > _CONTROL_SHARE * len(head):
        return "binary content (control bytes)"
    return None


def sniff(head: bytes) -> str:
    """A short name for what the first bytes look like, for the error naming a mislabelled file."""
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



def gunzip_head(data: bytes, limit: int = SNIFF_BYTES) -> bytes:
    """The first `limit` bytes a gzip stream decompresses to (all of a multi-member file's first
    member); raises ValueError for data that is not gzip or is damaged within what is read."""
    import zlib

    if not data.startswith(b"\x1f\x8b"):
        raise ValueError("not gzip data")
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, limit)
    except zlib.error as exc:
        raise ValueError(f"damaged gzip data ({exc})") from None


def inner_name(name: str) -> str:
    """The name of what a compressed file holds: `NEWS.md.gz` -> `NEWS.md`."""
    return name[: -len(COMPRESSED_TEXT)] if name.lower().endswith(COMPRESSED_TEXT) else name


def unlisted_reason(path: Path, accepted: frozenset[str]) -> str | None:
    """For a file whose extension is not in `accepted`: None when it is text to index (by its
    content; gzip by what it decompresses to), else why not. Reads at most 64 KB of it.
    Raises OSError when the file cannot be read."""
    ext = path.suffix.lower()
    if ext in accepted:
        return None
    if ext in BINARY_EXTENSIONS or ext in IMAGE_EXTENSIONS:
        what = "an image (OCR is off or not installed)" if ext in IMAGE_EXTENSIONS else "not a format indexed"
        return f"unsupported type: {ext} is {what}"
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES if ext != COMPRESSED_TEXT else 8 * SNIFF_BYTES)
    if ext == COMPRESSED_TEXT:
        inner = Path(inner_name(path.name)).suffix.lower()
        if inner in SUPPORTED_EXTENSIONS - TEXT_EXTENSIONS - {".json", ".csv"} or inner in IMAGE_EXTENSIONS:
            return f"unsupported type: compressed {inner} (only compressed text is indexed)"
        try:
            head = gunzip_head(head)
        except ValueError as exc:
            return f"unsupported type: {exc}"
    why = binary_reason(head)
    return f"unsupported type: {why}" if why else None
