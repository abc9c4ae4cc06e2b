"""Files and client-held content -> Markdown (`Converted`), in-process: the entry points.

The converter is chosen from the extension and the bytes are checked against it
first, so a mislabelled file fails with its real nature named instead of being
quietly converted as something else. A file of no listed type is indexed verbatim
when its bytes are text (README, NEWS, .rst, code; gzip-compressed text too).
Each family of formats has its module: `convert_text` (text kept verbatim),
`convert_pdf` (pdfium and OCR), `convert_markitdown` (Office, HTML, EPUB, CSV, notebooks).

Run `to_markdown` inside `isolate.ConvertPool` for untrusted corpora: it has no
time or memory limit of its own.
"""
from __future__ import annotations

import re
from pathlib import Path

from appliance.chunks import Converted
from appliance.errors import ConversionFailed, FileTooLarge, UnsupportedFile
from appliance.ingest.convert_markitdown import convert_with_markitdown, html_to_markdown
from appliance.ingest.convert_pdf import convert_image, convert_pdf
from appliance.ingest.convert_text import (
    convert_text_file,
    convert_unlisted,
    front_matter,
    strip_data_images,
    tidy_markdown,
)
from appliance.ingest.formats import (
    BINARY_EXTENSIONS,
    IMAGE_EXTENSIONS,
    SUPPORTED_EXTENSIONS,
    TEXT_EXTENSIONS,
    accepted_extensions,
)
from appliance.ingest.ocr import OcrConfig
from appliance.ingest.titles import choose_title

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


def _convert_file(path: Path, ext: str, ocr: OcrConfig | None) -> tuple[Converted, str | None]:
    """Returns the conversion and the converter's metadata title (HTML/EPUB)."""
    if ext in IMAGE_EXTENSIONS:
        return convert_image(path, ocr), None

    with open(path, "rb") as fh:
        head = fh.read(4096)
    if ext in TEXT_EXTENSIONS or ext == ".json":
        return convert_text_file(path, ext), None
    if ext == ".pdf":
        return convert_pdf(path, head, ocr), None
    return convert_with_markitdown(path, ext, head)


# ---------------------------------------------------------------- public API

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
        conv, meta_title = _convert_file(path, ext, ocr) if listed else convert_unlisted(path, max_file_size)
    except RecursionError:
        raise ConversionFailed(f"{path}: document nesting too deep to convert") from None
    markdown = conv.markdown if conv.has_lines else tidy_markdown(strip_data_images(conv.markdown))
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
        markdown, meta_title = html_to_markdown(content.encode("utf-8"), None)
        markdown = tidy_markdown(strip_data_images(markdown))
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
