"""Line-level reading of converted Markdown for the chunker.

Pure functions over a string: where each line starts, which lines form a fenced
code block (only when the fence is really closed), a table (header row, separator
row and at least one data row), an ATX heading or a slide marker, and which lines
look like transcript turns.  Nothing here counts tokens.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

# --- line index ------------------------------------------------------------------


@dataclass(slots=True)
class LineIndex:
    """Offsets of the lines of `text` (split on "\\n" only, so numbers match editors)."""

    text: str
    starts: list[int]

    @classmethod
    def of(cls, text: str) -> LineIndex:
        starts = [0]
        find = text.find
        pos = find("\n")
        while pos != -1:
            starts.append(pos + 1)
            pos = find("\n", pos + 1)
        return cls(text, starts)

    def __len__(self) -> int:
        return len(self.starts)

    def bounds(self, i: int) -> tuple[int, int]:
        """[start, end) of line i (0-based), without its newline."""
        start = self.starts[i]
        end = self.starts[i + 1] - 1 if i + 1 < len(self.starts) else len(self.text)
        return start, end

    def line(self, i: int) -> str:
        start, end = self.bounds(i)
        return self.text[start:end]

    def number_at(self, offset: int) -> int:
        """1-based number of the line holding character `offset`."""
        return bisect_right(self.starts, offset)


# --- block grammar ----------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_HEADING_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")
_SLIDE = re.compile(r"^\s*<!--\s*Slide number:\s*(\d+)\s*-->\s*$")
PAGE_MARKER = "<!-- Page number: {n} -->"
"""Put by the converter before the text of each page of a paged source (PDF, multi-frame image)."""
SHEET_MARKER = "<!-- Sheet name: {name} -->"
"""Put by the converter before each sheet's `## Name` heading of a workbook."""
LOCATION_MARKER = re.compile(r"^[ \t]*<!-- (Page number|Sheet name): ([^\n]*?) -->[ \t]*$", re.M)
"""Page and sheet markers: the chunker records them per chunk and blanks their lines."""
_TABLE_ROW = re.compile(r"^ {0,3}\|")
_TABLE_SEP = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?\s*$")
_LONG_LINE = 20_000  # lines longer than this are never headings, separators or markers


@dataclass(slots=True)
class Block:
    """A run of lines [first, last] (0-based, inclusive) with one structural role.

    kind: "para" (lines up to a blank line), "table" (first line is the header row,
    the second the separator), "code" (a fenced block with a real closing fence),
    "heading" (one ATX heading line) or "slide" (one markitdown slide marker).
    """

    kind: str
    first: int
    last: int
    level: int = 0
    title: str = ""
    number: int = 0


def heading_of(line: str) -> tuple[int, str] | None:
    """(level, title) when `line` is an ATX heading."""
    if len(line) > _LONG_LINE or not line.lstrip(" ").startswith("#"):
        return None
    m = _HEADING.match(line)
    if not m:
        return None
    title = _HEADING_CLOSE.sub("", m.group(2) or "").strip()
    return len(m.group(1)), title


def slide_number(line: str) -> int | None:
    if len(line) > 200:
        return None
    m = _SLIDE.match(line)
    return int(m.group(1)) if m else None


def is_table_row(line: str) -> bool:
    return bool(_TABLE_ROW.match(line))


def is_table_separator(line: str) -> bool:
    return len(line) <= _LONG_LINE and "-" in line and bool(_TABLE_SEP.match(line))


def _fence_of(line: str) -> tuple[str, int, str] | None:
    if len(line) > _LONG_LINE:
        return None
    m = _FENCE.match(line)
    if not m:
        return None
    marker, info = m.group(1), m.group(2)
    if marker[0] == "`" and "`" in info:  # not a fence by CommonMark rules
        return None
    return marker[0], len(marker), info.strip()


def _closing_fences(lines: LineIndex) -> dict[str, list[tuple[int, int]]]:
    """Lines that can close a fence: bare fence markers, by character, in order."""
    out: dict[str, list[tuple[int, int]]] = {"`": [], "~": []}
    for i in range(len(lines)):
        f = _fence_of(lines.line(i))
        if f and not f[2]:
            out[f[0]].append((i, f[1]))
    return out


def parse_blocks(lines: LineIndex) -> list[Block]:
    """Split the document into blocks; blank lines separate blocks and belong to none."""
    closers = _closing_fences(lines)
    n = len(lines)
    blocks: list[Block] = []

    def close_of(i: int, char: str, length: int) -> int | None:
        seq = closers[char]
        k = bisect_right(seq, (i, 1 << 30))
        while k < len(seq):
            j, ln = seq[k]
            if ln >= length:
                return j
            k += 1
        return None

    def starts_block(i: int) -> bool:
        line = lines.line(i)
        if heading_of(line) or slide_number(line) is not None:
            return True
        f = _fence_of(line)
        if f and close_of(i, f[0], f[1]) is not None:
            return True
        return table_end(i) is not None

    def table_end(i: int) -> int | None:
        if i + 2 >= n:
            return None
        if not (is_table_row(lines.line(i)) and is_table_separator(lines.line(i + 1))
                and is_table_row(lines.line(i + 2))):
            return None
        j = i + 2
        while j + 1 < n and is_table_row(lines.line(j + 1)):
            j += 1
        return j

    i = 0
    while i < n:
        line = lines.line(i)
        if not line.strip():
            i += 1
            continue
        f = _fence_of(line)
        if f:
            j = close_of(i, f[0], f[1])
            if j is not None:
                blocks.append(Block("code", i, j))
                i = j + 1
                continue
        h = heading_of(line)
        if h:
            blocks.append(Block("heading", i, i, level=h[0], title=h[1]))
            i += 1
            continue
        s = slide_number(line)
        if s is not None:
            blocks.append(Block("slide", i, i, number=s))
            i += 1
            continue
        t = table_end(i)
        if t is not None:
            blocks.append(Block("table", i, t))
            i = t + 1
            continue
        j = i
        while j + 1 < n and lines.line(j + 1).strip() and not starts_block(j + 1):
            j += 1
        blocks.append(Block("para", i, j))
        i = j + 1
    return blocks


# --- transcripts -------------------------------------------------------------------

_TS = r"(?:\d{1,2}:)?\d{1,2}:\d{2}(?:[.,]\d{1,3})?(?![:\d])"
_LEAD_IMAGES = r"(?:!\[[^\]\n]{0,300}\]\([^)\n]{0,2000}\)\s*)*"
_TIMESTAMP_FIRST = re.compile(
    rf"^\s*{_LEAD_IMAGES}(?:[-*>]\s+)?(?:\*\*|__)?[\[(]?(?P<ts>{_TS})[\])]?(?:\*\*|__)?(?=\s|$|[-–—:|,])")
_SPEAKER_FIRST = re.compile(
    rf"^\s*{_LEAD_IMAGES}(?:[-*>]\s+)?(?:\*\*|__)?[^\W\d_][\w.'’ -]{{0,40}}?(?:\*\*|__)?:?\s+"
    rf"[\[(]?(?P<ts>{_TS})[\])]?(?:\*\*|__)?\s*(?:$|[-–—:|]\s*)")


def timestamp_seconds(line: str) -> int | None:
    """Seconds of the turn that `line` opens, or None when it is not a timestamp line.

    Accepted shapes: a timestamp first (``00:01:02 Speaker: text``, ``[12:30] text``,
    VTT/SRT cue timings) or a short speaker name followed by a timestamp (``Name 1:02:03``
    with the words on the next line, as meeting tools export it).  Two-part stamps are
    minutes:seconds; minutes and seconds must be below 60.
    """
    head = line[:400]
    m = _TIMESTAMP_FIRST.match(head) or _SPEAKER_FIRST.match(head)
    if not m:
        return None
    stamp = re.split(r"[.,]", m.group("ts"))[0]
    parts = [int(p) for p in stamp.split(":")]
    if any(p >= 60 for p in parts[1:]):
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + p
    return seconds
