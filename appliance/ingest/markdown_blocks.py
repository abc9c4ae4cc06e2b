"""The one reading of converted Markdown: blocks, fences, headings, titles, front matter.

markdown-it-py (CommonMark plus GFM tables) parses the document once per text; the
chunker, the title chooser and the data-image stripper all read that parse instead of
tracking fences by hand.  Our rules on top of CommonMark, for Markdown that converters
wrote from PDFs, scans and Office files as much as for Markdown people wrote:

* a fenced code block counts only when it is really closed (an unclosed fence is a
  line of text, so a stray ``` in a converted document cannot swallow the rest);
* headings are ATX headings and one-line setext headings, at the top level (not inside
  lists or quotes); a paragraph over a line of "=" is no heading;
* a table is a GFM table whose rows start with "|", with at least one data row, outside
  block quotes; it ends at the first line without a "|";
* a YAML front-matter block at the very top is text, never a heading or rule.

Also here: where each line starts (`LineIndex`), markitdown's slide markers, our page
and sheet markers, and which lines look like transcript turns.  Nothing counts tokens.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_block.fence import fence as _commonmark_fence
from markdown_it.rules_block.lheading import lheading as _commonmark_setext
from markdown_it.rules_block.table import table as _gfm_table

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


# --- markers ----------------------------------------------------------------------

_SLIDE = re.compile(r"^\s*<!--\s*Slide number:\s*(\d+)\s*-->\s*$")
PAGE_MARKER = "<!-- Page number: {n} -->"
"""Put by the converter before the text of each page of a paged source (PDF, multi-frame image)."""
SHEET_MARKER = "<!-- Sheet name: {name} -->"
"""Put by the converter before each sheet's `## Name` heading of a workbook."""
LOCATION_MARKER = re.compile(r"^[ \t]*<!-- (Page number|Sheet name): ([^\n]*?) -->[ \t]*$", re.M)
"""Page and sheet markers: the chunker records them per chunk and blanks their lines."""
_LONG_LINE = 20_000  # a heading longer than this is text, not a section title


def slide_number(line: str) -> int | None:
    if len(line) > 200:
        return None
    m = _SLIDE.match(line)
    return int(m.group(1)) if m else None


# --- the parse -------------------------------------------------------------------


@dataclass(slots=True)
class Block:
    """A run of lines [first, last] (0-based, inclusive) with one structural role.

    kind: "para" (lines up to a blank line), "table" (first line is the header row,
    the second the separator), "code" (a fenced block with a real closing fence),
    "heading" (an ATX heading line or a setext heading with its underline) or "slide"
    (one markitdown slide marker).
    """

    kind: str
    first: int
    last: int
    level: int = 0
    title: str = ""
    number: int = 0


@dataclass(slots=True)
class Parsed:
    """What the document holds, by line (0-based): its blocks in order, the lines of its
    closed fenced code blocks at any depth, and its front-matter block."""

    blocks: list[Block]
    code: list[tuple[int, int]] = field(default_factory=list)
    front_matter: tuple[int, int] | None = None

    def first_h1(self) -> str | None:
        return next((b.title for b in self.blocks if b.kind == "heading" and b.level == 1), None)


_FENCE_LINE = re.compile(r"^(?:[ \t]*>)*[ \t]*(`{3,}|~{3,})[ \t]*$", re.M)


def _closers(state: StateBlock) -> dict[str, tuple[list[int], list[int]]]:
    """Per fence character: the lines that could close a fence, and from each of them on
    the longest such marker (so "is there a closer after line n" is one bisect)."""
    cached = state.env.get("closers")
    if cached is None:
        src = state.src
        lines: dict[str, list[tuple[int, int]]] = {"`": [], "~": []}
        starts = LineIndex.of(src).starts
        for m in _FENCE_LINE.finditer(src):
            lines[m.group(1)[0]].append((bisect_right(starts, m.start()) - 1, len(m.group(1))))
        cached = {}
        for char, found in lines.items():
            longest = [n for _, n in found]
            for k in range(len(longest) - 2, -1, -1):
                longest[k] = max(longest[k], longest[k + 1])
            cached[char] = ([i for i, _ in found], longest)
        state.env["closers"] = cached
    return cached


def _closed_fence(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """CommonMark's fence rule, taking only fences that close before their container ends.

    Cost stays linear: an opener with no possible closing line after it fails at once, and
    an opener inside the span of a failed one (same container, not shorter) fails too,
    instead of scanning to the container's end again.
    """
    pos = state.bMarks[start] + state.tShift[start]
    marker = state.src[pos:pos + 1]
    if marker not in ("`", "~") or state.is_code_block(start):
        return False
    line = state.src[pos:state.eMarks[start]]
    length = len(line) - len(line.lstrip(marker))
    lines, longest = _closers(state)[marker]
    k = bisect_right(lines, start)
    if k == len(lines) or longest[k] < length:
        return False  # no line after this one can close it
    key = (marker, end, state.blkIndent)
    failed = state.env.setdefault("failed", {}).get(key)
    if failed is not None and start < failed[0] and length >= failed[1]:
        return False
    if silent:
        return _commonmark_fence(state, start, end, True)
    before = len(state.tokens)
    if not _commonmark_fence(state, start, end, False):
        return False
    token = state.tokens[-1]
    assert token.map is not None  # a block token always carries its line range
    last = token.map[1] - 1
    if last > start and not state.is_code_block(last):
        a, b = state.bMarks[last] + state.tShift[last], state.eMarks[last]
        close = state.src[a:b].rstrip(" \t")
        if len(close) >= length and close.strip(marker) == "":
            return True
    stop = token.map[1]
    state.env["failed"][key] = (stop, min(length, failed[1]) if failed and failed[0] == stop else length)
    del state.tokens[before:]
    state.line = start
    return False


def _content(state: StateBlock, line: int) -> str:
    return state.src[state.bMarks[line] + state.tShift[line]:state.eMarks[line]]


def _first(state: StateBlock, line: int) -> str:
    """The first character of the line after its indentation ("" for a blank line)."""
    pos = state.bMarks[line] + state.tShift[line]
    return state.src[pos] if pos < state.eMarks[line] else ""


def _piped_table(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """GFM's table rule for tables whose header and data rows start with "|": the table ends
    at the first line that does not, where GFM would take any following text line as a row
    (markitdown writes a PDF's text lines right after its tables).

    GFM checks the header, the separator and the first row; the other rows are only
    counted, since nothing here reads cells (splitting them was a quarter of the parse).
    """
    if _first(state, start) != "|":
        return False
    stop, last = start + 2, min(end, start + 3) if silent else end
    while (stop < last and state.sCount[stop] >= state.blkIndent and not state.is_code_block(stop)
           and _first(state, stop) == "|"):
        stop += 1
    before = len(state.tokens)
    if not _gfm_table(state, start, min(stop, start + 3), silent):
        return False
    if not silent:
        state.tokens[before].map = [start, stop]
        state.line = stop
    return True


_UNDERLINE = re.compile(r"(?:=+|-+)[ \t]*")


def _one_line_setext(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """Setext headings of one line of text over an underline of at least three characters: in
    text converted from PDFs and scans a paragraph above a rule of "=" signs, or a formula's "="
    on a line of its own, is no heading."""
    under = start + 1
    if (under >= end or _first(state, under) not in ("=", "-") or state.sCount[under] < state.blkIndent
            or state.is_code_block(under) or not _UNDERLINE.fullmatch(_content(state, under))
            or len(_content(state, under).rstrip()) < 3):
        return False  # decided before CommonMark's rule scans the whole paragraph for an underline
    before = len(state.tokens)
    if not _commonmark_setext(state, start, end, silent):
        return False
    if state.tokens[before].map == [start, start + 2]:
        return True
    del state.tokens[before:]
    state.line = start
    return False


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable("table")
    md.block.ruler.at("fence", _closed_fence, {"alt": ["paragraph", "reference", "blockquote", "list"]})
    md.block.ruler.at("table", _piped_table, {"alt": ["paragraph", "reference"]})
    md.block.ruler.at("lheading", _one_line_setext)
    md.core.ruler.enableOnly(["normalize", "block"])  # blocks only: inline content stays raw
    return md


_MD = _parser()
_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)


def front_matter_lines(text: str) -> tuple[int, int] | None:
    """[first, last] lines of a YAML front-matter block opening the text, or None."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return None
    return 0, m.group(0).rstrip("\r\n").count("\n")


@lru_cache(maxsize=1)
def parse(text: str) -> Parsed:
    """The blocks of `text`, cached for the last text: the data-image stripper and the
    title chooser read the same text, and so may the chunker (treat the result as read-only)."""
    lines = LineIndex.of(text)
    fm = front_matter_lines(text)
    src = text.replace("\r", " ")  # lines end at "\n" only, as in LineIndex; markdown-it would split at \r
    if fm is not None:
        src = "\n" * (fm[1] + 1) + src[lines.bounds(fm[1])[1] + 1:] if fm[1] + 1 < len(lines) else ""
    tokens = _MD.parse(src, {})
    special: list[Block] = []
    code: list[tuple[int, int]] = []
    quoted = 0
    for k, tok in enumerate(tokens):
        kind = tok.type
        if kind == "blockquote_open":
            quoted += 1
        elif kind == "blockquote_close":
            quoted -= 1
        elif kind == "fence" and tok.map:
            code.append((tok.map[0], tok.map[1] - 1))
            if not quoted:
                special.append(Block("code", tok.map[0], tok.map[1] - 1))
        elif kind == "heading_open" and tok.level == 0 and tok.map:
            title = tokens[k + 1].content
            if len(title) <= _LONG_LINE:
                special.append(Block("heading", tok.map[0], tok.map[1] - 1, level=int(tok.tag[1]), title=title))
        elif kind == "table_open" and not quoted and tok.map and tok.map[1] - tok.map[0] >= 3:
            special.append(Block("table", tok.map[0], tok.map[1] - 1))
        elif kind == "html_block" and tok.level == 0 and tok.map:
            number = slide_number(lines.line(tok.map[0]))
            if number is not None:
                special.append(Block("slide", tok.map[0], tok.map[0], number=number))
    special.sort(key=lambda b: b.first)
    return Parsed(with_paragraphs(lines, special), code, fm)


def with_paragraphs(lines: LineIndex, special: list[Block]) -> list[Block]:
    """`special` with the lines between them as paragraphs, split at blank lines."""
    filled = [bool(line.strip()) for line in lines.text.split("\n")]
    out: list[Block] = []
    i = 0
    n = len(filled)
    for b in [*special, Block("end", n, n)]:
        if b.first < i:
            continue  # nested inside a block already taken
        while i < b.first:
            if not filled[i]:
                i += 1
                continue
            j = i
            while j + 1 < b.first and filled[j + 1]:
                j += 1
            out.append(Block("para", i, j))
            i = j + 1
        if b.kind != "end":
            out.append(b)
            i = b.last + 1
    return out


def parse_blocks(lines: LineIndex) -> list[Block]:
    """Split the document into blocks; blank lines separate blocks and belong to none."""
    return list(parse(lines.text).blocks)


def first_h1(markdown: str) -> str | None:
    """The raw text of the first top-level level-1 heading (ATX or setext), or None."""
    return parse(markdown).first_h1()


def code_lines(markdown: str) -> list[tuple[int, int]]:
    """[first, last] lines of every closed fenced code block, at any depth, in order."""
    return parse(markdown).code


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
