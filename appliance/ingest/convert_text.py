"""Text formats -> Markdown, kept verbatim: listed text files, text recognised by content, and the
small readers every conversion shares (front matter, inline data images, markitdown's tidying).

Text is decoded by `textfile` with detected encodings, never assumed UTF-8.
"""
from __future__ import annotations

import re
from pathlib import Path

from appliance.chunks import Converted
from appliance.errors import ConversionFailed, FileTooLarge, UnsupportedFile
from appliance.ingest import markup
from appliance.ingest.failures import BinaryContent
from appliance.ingest.formats import (
    COMPRESSED_TEXT,
    IMAGE_EXTENSIONS,
    SNIFF_BYTES,
    SUPPORTED_EXTENSIONS,
    TEXT_EXTENSIONS,
    binary_reason,
    inner_name,
)
from appliance.ingest.markdown_blocks import code_lines, front_matter_lines
from appliance.ingest.textfile import read_text

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


def tidy_markdown(markdown: str) -> str:
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


def convert_text_file(path: Path, ext: str) -> Converted:
    """A listed text format (Markdown, plain text, JSON), verbatim: line N is line N of the file."""
    text, enc = read_text(path)
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    meta = {"encoding": enc}
    if ext in (".md", ".markdown"):
        meta.update(front_matter(text))
    return Converted(markdown=strip_data_images(text), has_lines=True, metadata=meta)


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


def convert_unlisted(path: Path, max_file_size: int) -> tuple[Converted, str | None]:
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
