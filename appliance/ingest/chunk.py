"""Structure-first chunking of converted Markdown.

Two units come out of one document:

* the retrieval unit, a `Chunk` whose `text` is embedded and ranked; it never holds
  more than `budget` tokens of the embedding model (one bounded exception: a fenced
  code block with a real closing fence may reach 4 x budget);
* the parent section, the `Chunk.section` ordinal shared by every chunk cut from it;
  it is what a caller reads, and it is capped at `SECTION_CHAR_CAP` characters.

`Chunk.text` is a context prefix (a label line, a table's header row, the marker of a
split code block) followed by the body, `text[body_start:]`, which is the document's
own text.  Bodies carry the whitespace that separated them from the next chunk in the
source, so joining them in order gives the document back (`reconstruct`).

The kind of document is read from the Markdown itself: a transcript (regular timestamp
lines), a slide deck (markitdown's slide markers), a document with headings (two or
more, as `markdown_blocks` reads them) or, failing all of them, a generic document.

Cost stays close to linear in the document size: tokens are counted on pieces no longer
than a few budgets, never on a growing string, and each chunk is verified with one count.
"""
from __future__ import annotations

import itertools
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar

from appliance.chunks import Chunk, TokenCounter
from appliance.ingest import markup
from appliance.ingest.markdown_blocks import (
    LOCATION_MARKER,
    Block,
    LineIndex,
    parse_blocks,
    timestamp_seconds,
)

SCHEME_VERSION = "structure-v2"
"""v2: page/sheet marker lines are blanked out of chunk text and recorded as each chunk's
page range, sheet and slide (`Chunk.page_start` etc.)."""
SECTION_CHAR_CAP = 4000
CODE_SPLIT_MARKER = "[code block split to fit the token budget]"
CODE_BLOCK_BUDGETS = 4
"""A closed fenced code block stays in one chunk up to this many budgets."""
TRANSCRIPT_WINDOW_SECONDS = 120
TRANSCRIPT_LINE_SHARE = 0.13
"""Share of non-blank lines that must be timestamp lines for a transcript.

Measured with `markdown_blocks.timestamp_seconds` on /work/shared/corpus converted with
markitdown (656 non-empty documents).  The corpus holds one real transcript, a meeting
tool's export saved as .docx: 2 of its 6 non-blank lines match (33.3%), and 2 of 9
(22.2%) in the Markdown twin of the same file.  Of the 654 other documents, 651 match
0.0%, two match 3.6% (one WebVTT cue line quoted in a Markdown escaping test and its
twin) and one 0.07% (a clock time on a PDF poster).  Transcripts generated in the tests
run at 50% (stamp line, then words) to 100% (one line per turn).  0.13 sits in the middle
of the empty gap between 3.6% and 22.2%.
"""
TRANSCRIPT_MIN_LINES = 2
TRANSCRIPT_MONOTONE_SHARE = 0.8
"""Successive timestamps must go forward this often: a transcript's clock is regular."""
MIN_BUDGET = 16
PAGE_BREAK_SHARE = 2
"""A page break ends a chunk holding at least budget // 2 tokens, so most chunks cite one page,
while pages of a few words (slides printed as PDF, a 10,000-page file of one line each) still
share chunks instead of becoming one tiny unit each."""
_CRUMB_SHARE = 3   # a breadcrumb/label takes at most budget // 3 tokens
_HEADER_SHARE = 2  # a repeated table header takes at most budget // 2 tokens
_ELLIPSIS = "…"

_SENTENCE_END = re.compile(r"[.!?…;:。！？；](?:[\"'”’»)\]]*)(?=\s)|[。！？；]")
_WS_RUN = re.compile(r"\s+")


# --- records used while cutting ------------------------------------------------------


@dataclass(slots=True)
class _Table:
    start: int            # offset of the header row in the document
    context: str          # what later chunks of the table repeat (header row + separator)


@dataclass(slots=True)
class _Unit:
    """A contiguous run of source text that is cut in one way.

    kind: "text" (paragraph/list lines), "heading" (a heading line or slide marker),
    "theader" (a table's header + separator rows), "row" (one table row), "code"
    (a closed fenced block kept whole), "codesplit" (lines of a fenced block too big to
    keep whole).
    """

    kind: str
    start: int
    end: int
    table: _Table | None = None
    group: int = -1


@dataclass(slots=True)
class _Section:
    label: str
    parts: list[str]
    """The label's components, outermost first (headings of a breadcrumb)."""
    units: list[_Unit] = field(default_factory=list)


@dataclass(slots=True)
class _Piece:
    start: int
    end: int
    tokens: int
    kind: str
    table: _Table | None = None
    group: int = -1

    @property
    def glue(self) -> bool:
        """Must not end a chunk when something could follow it."""
        return self.kind in ("heading", "theader")


class _Counter:
    """The caller's token counter plus a running chars-per-token estimate."""

    def __init__(self, count: TokenCounter) -> None:
        self.count = count
        self.ratio = 3.0
        self._cache: dict[str, int] = {}

    def cached(self, text: str) -> int:
        n = self._cache.get(text)
        if n is None:
            n = self._cache[text] = self.count(text)
        return n


_V = TypeVar("_V", int, str)


class Place(TypedDict):
    """Where a chunk sits in its document, as Chunk's fields of the same names."""

    page_start: int | None
    page_end: int | None
    sheet: str | None
    slide: int | None


@dataclass(slots=True)
class _Locations:
    """Where pages, sheets and slides start in the (blanked) document, by character offset."""

    pages: list[tuple[int, int]] = field(default_factory=list)
    sheets: list[tuple[int, str]] = field(default_factory=list)
    slides: list[tuple[int, int]] = field(default_factory=list)

    @staticmethod
    def _at(marks: list[tuple[int, _V]], offset: int) -> _V | None:
        k = bisect_right(marks, offset, key=lambda m: m[0])
        return marks[k - 1][1] if k else None

    def new_page(self, a: int, b: int) -> bool:
        """True when a page starts in (a, b]."""
        return bool(self.pages) and self._at(self.pages, a) != self._at(self.pages, b)

    def of(self, start: int, end: int) -> Place:
        """page_start/page_end/sheet/slide of the text md[start:end]."""
        last = max(start, end - 1)
        return Place(page_start=self._at(self.pages, start), page_end=self._at(self.pages, last),
                     sheet=self._at(self.sheets, start), slide=self._at(self.slides, start))


_SLIDE_LINE = re.compile(r"^[ \t]*<!--\s*Slide number:\s*(\d+)\s*-->[ \t]*$", re.M)


def blank_markers(markdown: str) -> tuple[str, _Locations]:
    """The document with each page/sheet marker line emptied (line numbers stay), and where
    each page, sheet and slide starts in it. Slide markers stay: they head their sections."""
    locs = _Locations()
    if "<!--" not in markdown:
        return markdown, locs
    parts: list[str] = []
    last = removed = 0
    for m in LOCATION_MARKER.finditer(markdown):
        kind, value = m.group(1), m.group(2).strip()
        if kind == "Page number" and not value.isdigit():
            continue
        parts.append(markdown[last:m.start()])
        pos = m.start() - removed
        removed += m.end() - m.start()
        last = m.end()
        if kind == "Page number":
            locs.pages.append((pos, int(value)))
        else:
            locs.sheets.append((pos, value))
    parts.append(markdown[last:])
    text = "".join(parts)
    locs.slides = [(m.start(), int(m.group(1))) for m in _SLIDE_LINE.finditer(text)]
    return text, locs


# --- public API -------------------------------------------------------------------


def chunk_document(markdown: str, *, count_tokens: TokenCounter, budget: int,
                   title: str | None = None, ceiling: int | None = None, syntax: str | None = None) -> list[Chunk]:
    """Cut converted Markdown into retrieval units grouped into parent sections.

    `ceiling` is the most tokens any unit may have, whole code blocks included (the
    model's window); without it a whole code block may reach 4 x budget. `syntax` names
    another text format whose headings `markup` reads (reStructuredText, AsciiDoc, Org ...).
    """
    if budget < MIN_BUDGET:
        raise ValueError(f"token budget {budget} is below the minimum of {MIN_BUDGET}")
    markdown, locs = blank_markers(markdown)
    if not markdown.strip():
        return []
    lines = LineIndex.of(markdown)
    counter = _Counter(count_tokens)
    code_cap = code_block_cap(budget, ceiling)
    sections = _sections(markdown, lines, counter, budget, title, code_cap, syntax)
    return _Packer(markdown, lines, counter, budget, code_cap, locs).run(sections)


def code_block_cap(budget: int, ceiling: int | None = None) -> int:
    """Tokens a whole fenced code block may take: 4 budgets, never past the ceiling."""
    cap = CODE_BLOCK_BUDGETS * budget
    return min(cap, max(ceiling, budget)) if ceiling else cap


def section_text(chunks: Sequence[Chunk]) -> str:
    """The parent section rebuilt from its chunks: label once, then the bodies.

    When the section starts inside a table (a table longer than the section cap), the
    header row its first chunk repeats is kept too, so the section reads as a table.
    """
    if not chunks:
        return ""
    ordered = sorted(chunks, key=lambda c: c.index)
    first = ordered[0]
    context_lines = first.text[:first.body_start].split("\n")
    if first.heading and context_lines:
        context_lines = context_lines[1:]
    keep = [ln for ln in context_lines if ln.strip() and ln.strip() != CODE_SPLIT_MARKER]
    head = ([first.heading] if first.heading else []) + keep
    body = "".join(c.body for c in ordered).strip()
    return "\n".join([*head, body]) if head else body


def reconstruct(chunks: Sequence[Chunk]) -> str:
    """The whole document rebuilt from its chunks in order, each context left out."""
    return "".join(c.body for c in sorted(chunks, key=lambda c: c.index)).strip()


# --- document kinds and sections ----------------------------------------------------


def _is_transcript(lines: LineIndex) -> list[int | None] | None:
    """Per-line turn times when the document reads as a transcript, else None."""
    stamps: list[int | None] = []
    nonblank = 0
    hits: list[int] = []
    for i in range(len(lines)):
        line = lines.line(i)
        if not line.strip():
            stamps.append(None)
            continue
        nonblank += 1
        s = timestamp_seconds(line)
        stamps.append(s)
        if s is not None:
            hits.append(s)
    if len(hits) < TRANSCRIPT_MIN_LINES or len(hits) < TRANSCRIPT_LINE_SHARE * nonblank:
        return None
    forward = sum(1 for a, b in itertools.pairwise(hits) if b >= a)
    if forward < TRANSCRIPT_MONOTONE_SHARE * (len(hits) - 1):
        return None
    return stamps


def _clock(seconds: int) -> str:
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def _sections(md: str, lines: LineIndex, counter: _Counter, budget: int,
              title: str | None, code_cap: int, syntax: str | None) -> list[_Section]:
    stamps = _is_transcript(lines)
    if stamps is not None:
        raw = _transcript_sections(lines, stamps, title)
    else:
        blocks = markup.blocks(lines, syntax)
        if any(b.kind == "slide" for b in blocks):
            raw = _slide_sections(blocks)
        elif sum(1 for b in blocks if b.kind == "heading") >= 2:
            raw = _heading_sections(blocks)
        else:
            raw = [("", [], blocks)] if blocks else []
    out: list[_Section] = []
    group = [0]
    for label, parts, blocks in raw:
        units = _units(md, lines, blocks, counter, budget, group, code_cap)
        if units:
            out.extend(_cap(md, label, parts, units))
    return out


_Raw = tuple[str, list[str], list[Block]]


def _transcript_sections(lines: LineIndex, stamps: list[int | None],
                         title: str | None) -> list[_Raw]:
    """One section per 120-second window of turns; text before the first turn leads.

    Each turn (a timestamp line and the lines up to the next one) is one block, so the
    packer fills a chunk with successive whole turns.
    """
    out: list[_Raw] = []
    current: list[Block] = []
    name = (title or "").strip()
    label = name
    window: int | None = None
    for i, s in enumerate(stamps):
        if s is not None:
            w = s // TRANSCRIPT_WINDOW_SECONDS
            if w != window:
                if current:
                    out.append((label, [label], current))
                start = w * TRANSCRIPT_WINDOW_SECONDS
                label = f"[{_clock(start)}–{_clock(start + TRANSCRIPT_WINDOW_SECONDS)}]"
                label = f"{label} {name}" if name else label
                current, window = [], w
            current.append(Block("para", i, i))
        elif lines.line(i).strip():
            if current:
                current[-1].last = i
            else:
                current.append(Block("para", i, i))
    if current:
        out.append((label, [label], current))
    return out


def _slide_sections(blocks: list[Block]) -> list[_Raw]:
    out: list[_Raw] = []
    label: str = ""
    current: list[Block] = []
    for b in blocks:
        if b.kind == "slide":
            if current:
                out.append((label, [label], current))
            label, current = f"Slide {b.number}", []
        current.append(b)
    if current:
        out.append((label, [label], current))
    return out


def _heading_sections(blocks: list[Block]) -> list[_Raw]:
    """Heading sections with their breadcrumb; an empty parent heading joins its child."""
    spans: list[tuple[Block | None, list[Block]]] = []
    for b in blocks:
        if b.kind == "heading" or not spans:
            spans.append((b if b.kind == "heading" else None, []))
        spans[-1][1].append(b)
    out: list[_Raw] = []
    stack: list[tuple[int, str]] = []
    carried: list[Block] = []
    for k, (head, members) in enumerate(spans):
        if head is not None:
            while stack and stack[-1][0] >= head.level:
                stack.pop()
            stack.append((head.level, head.title))
        parts = [t for _, t in stack if t]
        nxt = spans[k + 1][0] if k + 1 < len(spans) else None
        if (head is not None and len(members) == 1 and nxt is not None
                and nxt.level > head.level):
            carried.extend(members)  # no body, a child follows: its words ride along
            continue
        out.append((" > ".join(parts), parts, carried + members))
        carried = []
    return out


# --- units ---------------------------------------------------------------------------


def _units(md: str, lines: LineIndex, blocks: list[Block], counter: _Counter, budget: int,
           group: list[int], code_cap: int) -> list[_Unit]:
    units: list[_Unit] = []
    for b in blocks:
        start = lines.bounds(b.first)[0]
        end = lines.bounds(b.last)[1]
        if b.kind in ("heading", "slide"):
            units.append(_Unit("heading", start, end))
        elif b.kind == "table":
            h0, h1 = lines.bounds(b.first)[0], lines.bounds(b.first + 1)[1]
            header_row = lines.line(b.first).strip()
            sep_row = lines.line(b.first + 1).strip()
            table = _Table(h0, _table_context(header_row, sep_row, counter, budget))
            units.append(_Unit("theader", h0, h1, table))
            for i in range(b.first + 2, b.last + 1):
                r0, r1 = lines.bounds(i)
                units.append(_Unit("row", r0, r1, table))
        elif b.kind == "code":
            limit = code_cap - budget // _CRUMB_SHARE - 1
            size = end - start
            whole = size <= limit * 16 and counter.count(md[start:end]) <= limit
            group[0] += 1
            if whole:
                units.append(_Unit("code", start, end, group=group[0]))
            else:
                for i in range(b.first, b.last + 1):
                    r0, r1 = lines.bounds(i)
                    if md[r0:r1].strip():
                        units.append(_Unit("codesplit", r0, r1, group=group[0]))
        else:
            units.append(_Unit("text", start, end))
    return units


def _table_context(header: str, sep: str, counter: _Counter, budget: int) -> str:
    cap = budget // _HEADER_SHARE
    for candidate in (f"{header}\n{sep}", header):
        if counter.cached(candidate) <= cap:
            return candidate
    cut, _ = _fit(header, 0, len(header), cap - counter.cached(" " + _ELLIPSIS), counter,
                  words=True)
    return header[:cut].rstrip() + " " + _ELLIPSIS


# --- the section cap -----------------------------------------------------------------


def _cap(md: str, label: str, parts: list[str], units: list[_Unit]) -> list[_Section]:
    """Cut a section over SECTION_CHAR_CAP at unit, row, line and sentence boundaries.

    The cap holds for the section as `section_text` returns it: its label line and, for a
    section that starts inside a table, the header row repeated at its top count too.
    """
    out = [_Section(label, parts)]
    label_chars = len(label) + 1 if label else 0

    def size_with(u: _Unit) -> int:
        cur = out[-1].units
        first = cur[0] if cur else u
        extra = len(first.table.context) + 1 if first.kind == "row" and first.table else 0
        return u.end - first.start + label_chars + extra

    def add(u: _Unit) -> bool:
        if size_with(u) <= SECTION_CHAR_CAP:
            out[-1].units.append(u)
            return True
        return False

    def fresh(members: list[_Unit]) -> None:
        if out[-1].units:
            out.append(_Section(label, parts, []))
        out[-1].units.extend(members)

    def push(u: _Unit) -> None:
        if not add(u):
            fresh([u])

    i = 0
    while i < len(units):
        u = units[i]
        if u.kind == "theader":  # a table moves as one unless it alone is over the cap
            j = i
            while j + 1 < len(units) and units[j + 1].kind == "row" and units[j + 1].table is u.table:
                j += 1
            whole = _Unit("table", u.start, units[j].end)
            if add(whole):
                out[-1].units[-1:] = units[i:j + 1]
            elif whole.end - whole.start + label_chars <= SECTION_CHAR_CAP:
                fresh(list(units[i:j + 1]))
            else:
                for part in units[i:j + 1]:
                    push(part)
            i = j + 1
            continue
        if add(u):
            i += 1
            continue
        if u.end - u.start + label_chars <= SECTION_CHAR_CAP or u.kind not in ("text", "codesplit"):
            fresh([u])
        else:
            for part in _cap_pieces(md, u, SECTION_CHAR_CAP - label_chars):
                push(part)
        i += 1
    return [s for s in out if s.units]


def _cap_pieces(md: str, u: _Unit, cap: int) -> list[_Unit]:
    """A text run over the cap as lines, and lines over the cap as sentences."""
    out: list[_Unit] = []
    pos = u.start
    while pos < u.end:
        nl = md.find("\n", pos, u.end)
        end = u.end if nl == -1 else nl
        if md[pos:end].strip():
            if end - pos <= cap:
                out.append(_Unit(u.kind, pos, end, group=u.group))
            else:
                out.extend(_Unit(u.kind, a, b, group=u.group)
                           for a, b in _sentences(md, pos, end, cap))
        pos = end + 1
    return out


def _sentences(md: str, start: int, end: int, cap: int) -> list[tuple[int, int]]:
    """Sentence spans of md[start:end], grouped greedily up to the cap."""
    out: list[tuple[int, int]] = []
    a = start
    last = start
    for m in _SENTENCE_END.finditer(md, start, end):
        b = m.end()
        if b - a > cap and last > a:
            out.append((a, last))
            a = last
        last = b
    if end - a > cap and a < last < end:
        out.append((a, last))
        a = last
    out.append((a, end))
    return out


# --- fitting long text into the budget ----------------------------------------------


def _safe_cut(text: str, pos: int, lo: int) -> int:
    """Move a character cut back so it does not separate a mark or joiner from its base."""
    while pos > lo + 1 and pos < len(text) and (
            unicodedata.combining(text[pos]) or text[pos] in "\u200d\ufe0f\ufe0e"
            or text[pos - 1] == "\u200d" or 0x1F3FB <= ord(text[pos]) <= 0x1F3FF):
        pos -= 1
    return pos


def _fit(text: str, a: int, end: int, limit: int, counter: _Counter, *,
         words: bool, sentences: bool = False) -> tuple[int, int | None]:
    """Cut position b in (a, end] with text[a:b] within `limit` tokens, packed near full.

    Returns (b, tokens) where tokens is the count of the last window that fit: exact when
    b is that window's end, otherwise an estimate from above (a prefix cut at whitespace
    does not hold more tokens; the packer verifies every chunk anyway).

    Tries windows sized by the running chars-per-token estimate, so each call costs a
    handful of counts on budget-sized strings.  Prefers a sentence end (when asked),
    then whitespace, and cuts between characters only inside a word over the limit.
    """
    limit = max(1, limit)
    span = end - a
    w = min(span, max(8, int(limit * counter.ratio * 0.95)))
    good, good_tokens, bad = 0, 0, None
    for _ in range(64):
        c = counter.count(text[a:a + w])
        if c <= limit:
            good, good_tokens = w, c
            if w == span or c >= limit * 0.9:
                break
            nw = min(span, int(w * min(2.0, max(1.1, limit / max(c, 1))))) if bad is None \
                else (w + bad) // 2
        else:
            bad = w
            nw = min(w - 1, int(w * limit / c * 0.95))
            if nw <= good:
                nw = (good + bad) // 2
        if bad is not None and bad - good <= max(1, good // 16):
            break
        if nw <= 0 or nw == w:
            break
        w = nw
    if good_tokens:
        counter.ratio = max(0.5, min(12.0, good / good_tokens))
    if good == 0:
        return (_safe_cut(text, a + 1, a) if a + 1 < end else end), None
    cut = a + good
    if cut >= end:
        return end, good_tokens
    if sentences:
        best = -1
        for m in _SENTENCE_END.finditer(text, a + good // 2, cut):
            best = m.end()
        if best > a:
            return best, good_tokens
    if text[cut].isspace():
        return cut, good_tokens
    if words:
        k = cut - 1
        while k > a and not text[k].isspace():
            k -= 1
        if k > a:
            return k, good_tokens
    return _safe_cut(text, cut, a), good_tokens


def _split_to_pieces(md: str, a: int, end: int, limit: int, counter: _Counter, kind: str, *,
                     sentences: bool, table: _Table | None = None, group: int = -1,
                     first_limit: int | None = None) -> list[_Piece]:
    """md[a:end] as pieces of at most `limit` tokens each (verified by a count).

    `first_limit` makes the first piece smaller, to leave room for a heading before it.
    """
    out: list[_Piece] = []
    while True:
        while a < end and md[a].isspace():
            a += 1
        if a >= end:
            return out
        lim = limit
        if not out and first_limit is not None and first_limit >= max(4, limit // 4):
            lim = first_limit
        while True:
            cut, known = _fit(md, a, end, lim, counter, words=True, sentences=sentences)
            stop = cut
            while stop > a and md[stop - 1].isspace():
                stop -= 1
            tokens = known if known is not None else counter.count(md[a:stop])
            if tokens <= lim or cut - a <= 1:
                break
            lim = max(1, lim - max(1, tokens - limit))
        out.append(_Piece(a, stop, tokens, kind, table, group))
        a = cut


# --- packing ------------------------------------------------------------------------


def _elide(parts: list[str], cap: int, counter: _Counter) -> str:
    """The breadcrumb within `cap` tokens: drop middle headings, then shorten."""
    parts = [p for p in parts if p]
    if not parts:
        return ""
    full = " > ".join(parts)
    if counter.cached(full) <= cap:
        return full
    for keep in range(len(parts) - 2, 0, -1):
        text = " > ".join([parts[0], _ELLIPSIS, *parts[-keep:]])
        if counter.cached(text) <= cap:
            return text
    room = cap - counter.cached(" " + _ELLIPSIS)
    if room > 0:
        cut, _ = _fit(full, 0, len(full), room, counter, words=True)
        text = full[:cut].rstrip() + " " + _ELLIPSIS
        if counter.cached(text) <= cap:
            return text
    return ""


class _Packer:
    def __init__(self, md: str, lines: LineIndex, counter: _Counter, budget: int, code_cap: int,
                 locs: _Locations) -> None:
        self.md, self.lines, self.counter, self.budget, self.code_cap = md, lines, counter, budget, code_cap
        self.locs = locs
        self.chunks: list[Chunk] = []

    def run(self, sections: list[_Section]) -> list[Chunk]:
        for ordinal, section in enumerate(sections):
            self._section(ordinal, section)
        return self.chunks

    def _context(self, label_line: str, first: _Piece) -> str:
        parts = [label_line] if label_line else []
        if first.table is not None and (first.kind == "row" or first.start > first.table.start):
            parts.append(first.table.context)
        if first.kind == "codepart":
            parts.append(CODE_SPLIT_MARKER)
        return "".join(p + "\n" for p in parts)

    def _limit(self, label_line: str, probe: _Piece) -> int:
        ctx = self._context(label_line, probe)
        return self.budget - (self.counter.cached(ctx) + 1 if ctx else 0)

    def _pieces(self, label_line: str, units: list[_Unit]) -> list[_Piece]:
        md, counter = self.md, self.counter
        out: list[_Piece] = []
        for u in units:
            kind = {"codesplit": "codepart"}.get(u.kind, u.kind)
            probe = _Piece(u.start, u.end, 0, kind, u.table, u.group)
            # a header cut in pieces gets the repeated header in front of its later pieces
            limit = self._limit(label_line, _Piece(u.start, u.end, 0, "row", u.table)) \
                if kind == "theader" else self._limit(label_line, probe)
            if u.kind == "code":
                probe.tokens = counter.count(md[u.start:u.end])
                out.append(probe)
                continue
            if u.end - u.start <= limit * 6:
                tokens = counter.count(md[u.start:u.end])
                if tokens <= limit:
                    probe.tokens = tokens
                    out.append(probe)
                    continue
            pos = u.start
            while pos < u.end:  # line by line; a line over the limit is cut further
                nl = md.find("\n", pos, u.end)
                end = u.end if nl == -1 else nl
                a, b = pos, end
                while a < b and md[a].isspace():
                    a += 1
                while b > a and md[b - 1].isspace():
                    b -= 1
                pos = end + 1
                if a == b:
                    continue
                tokens = counter.count(md[a:b]) if b - a <= limit * 12 else limit + 1
                if tokens <= limit:
                    out.append(_Piece(a, b, tokens, kind, u.table, u.group))
                else:
                    glued = 0
                    for p in reversed(out):
                        if not p.glue:
                            break
                        glued += p.tokens
                    out.extend(_split_to_pieces(
                        md, a, b, limit, counter, kind, sentences=kind == "text",
                        table=u.table, group=u.group, first_limit=limit - glued))
        return out

    def _section(self, ordinal: int, section: _Section) -> None:
        counter, budget = self.counter, self.budget
        label_line = _elide(section.parts, budget // _CRUMB_SHARE, counter)
        if section.label and not label_line:
            label_line = _ELLIPSIS  # keeps the label line's place for section_text
        pieces = self._pieces(label_line, section.units)
        i = 0
        while i < len(pieces):
            first = pieces[i]
            ctx = self._context(label_line, first)
            ctx_tokens = counter.cached(ctx) if ctx else 0
            total = ctx_tokens + first.tokens
            j = i
            if not (first.kind == "code" and total > budget):
                while j + 1 < len(pieces):
                    q = pieces[j + 1]
                    if (q.kind == "codepart") != (first.kind == "codepart") or (
                            q.kind == "codepart" and q.group != first.group):
                        break
                    if total + q.tokens > budget:
                        break
                    if total >= budget // PAGE_BREAK_SHARE and self.locs.new_page(first.start, q.start):
                        break  # a page break ends a chunk that is already half full
                    total += q.tokens
                    j += 1
            while j > i and pieces[j].glue:
                j -= 1
            text, body_start = self._text(ctx, pieces, i, j)
            tokens = counter.count(text)
            while tokens > budget and j > i:
                j -= 1
                while j > i and pieces[j].glue:
                    j -= 1
                text, body_start = self._text(ctx, pieces, i, j)
                tokens = counter.count(text)
            cap = self.code_cap if first.kind == "code" and j == i else budget
            if tokens > cap:  # one piece that did not fit with its context after all
                real = counter.count(self.md[first.start:first.end])
                limit = max(1, real - (tokens - cap) - 1)
                kind = "codepart" if first.kind == "code" else first.kind
                parts = _split_to_pieces(self.md, first.start, first.end, limit, counter, kind,
                                         sentences=kind == "text", table=first.table,
                                         group=first.group)
                if len(parts) > 1 or kind != first.kind:
                    pieces[i:i + 1] = parts
                    continue
            self._emit(ordinal, section.label, text, body_start, pieces[i], pieces[j])
            i = j + 1

    def _text(self, ctx: str, pieces: list[_Piece], i: int, j: int) -> tuple[str, int]:
        md = self.md
        body = md[pieces[i].start:pieces[j].end]
        end = pieces[j].end
        k = end
        while k < len(md) and md[k].isspace():
            k += 1
        if k > end and k < len(md):  # keep the separator so bodies join back exactly
            gap = md[end:k]
            body += "\n\n" if gap.count("\n") >= 2 else "\n" if "\n" in gap else " "
        return ctx + body, len(ctx)

    def _emit(self, ordinal: int, label: str, text: str, body_start: int,
              first: _Piece, last: _Piece) -> None:
        self.chunks.append(Chunk(
            index=len(self.chunks), section=ordinal, text=text, body_start=body_start,
            start_line=self.lines.number_at(first.start),
            end_line=self.lines.number_at(max(first.start, last.end - 1)), heading=label,
            **self.locs.of(first.start, last.end)))


def collapse_whitespace(text: str) -> str:
    """Text with every run of whitespace made one space (how reconstruction is compared)."""
    return _WS_RUN.sub(" ", text).strip()


def audit(markdown: str, chunks: Sequence[Chunk], *, count_tokens: TokenCounter,
          budget: int, ceiling: int | None = None) -> list[str]:
    """Broken rules in `chunks` cut from `markdown`, as sentences; [] when all hold.

    Checked: the token budget (a whole fenced code block may reach 4 x budget), that the
    bodies give the document back, that every data row of a table sits whole in one body
    and is preceded by its header row in the chunk's text, and the line numbers.
    """
    problems: list[str] = []
    markdown = blank_markers(markdown)[0]
    lines = LineIndex.of(markdown)
    pos = 0
    for c in chunks:
        n = count_tokens(c.text)
        body = c.body.strip()
        code = body.startswith(("```", "~~~")) and body.endswith(body[:3]) and "\n" in body
        if n > budget and not (code and n <= code_block_cap(budget, ceiling)):
            problems.append(f"chunk {c.index} has {n} tokens, over the budget of {budget}")
        offset = markdown.find(body[:40], pos)
        if offset >= 0:
            pos = offset + max(1, len(body))
            if c.start_line is not None and lines.number_at(offset) != c.start_line:
                problems.append(f"chunk {c.index} starts on line {lines.number_at(offset)}, "
                                f"not {c.start_line}")
    if collapse_whitespace(reconstruct(chunks)) != collapse_whitespace(markdown):
        problems.append("the chunks' bodies do not give the document back")
    sections: dict[int, list[Chunk]] = {}
    for c in chunks:
        sections.setdefault(c.section, []).append(c)
    for ordinal, members in sections.items():
        if len({c.heading for c in members}) != 1:
            problems.append(f"section {ordinal} has chunks with different labels")
        joined = collapse_whitespace("".join(c.body for c in members))
        if not collapse_whitespace(section_text(members)).endswith(joined):
            problems.append(f"section {ordinal} text does not hold its chunks' bodies")
    by_line: dict[int, list[Chunk]] = {}
    for c in chunks:
        if c.start_line is not None and c.end_line is not None:
            for number in range(c.start_line, c.end_line + 1):
                by_line.setdefault(number, []).append(c)
    if _is_transcript(lines) is None:
        for b in parse_blocks(lines):
            if b.kind != "table":
                continue
            header = lines.line(b.first).strip()
            if count_tokens(header) > budget // _HEADER_SHARE:
                continue  # repeated shortened, by design
            for i in range(b.first + 2, b.last + 1):
                row = lines.line(i).strip()
                holders = [c for c in by_line.get(i + 1, ()) if row in c.body]
                if len(holders) == 1:
                    text = holders[0].text
                    if text.find(header) == -1 or text.find(header) > text.rfind(row):
                        problems.append(f"table row on line {i + 1} comes without its header row")
                elif not holders and count_tokens(row) <= budget // 6:
                    problems.append(f"table row on line {i + 1} was split across chunks")
    return problems
