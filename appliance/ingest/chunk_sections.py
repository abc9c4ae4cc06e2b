"""A document's parent sections, read from its Markdown, and the units each is cut into.

The kind of document decides the sections: a transcript (regular timestamp lines) is cut
into 120-second windows, a slide deck into slides, a document with two or more headings
into heading sections with their breadcrumb, anything else is one section. Each section
is then a list of units (paragraphs, headings, table rows, code blocks) within
`SECTION_CHAR_CAP` characters, which the packer (`chunk_pack`) fills chunks with.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from appliance.ingest import markup
from appliance.ingest.chunk_fit import ELLIPSIS, SENTENCE_END, BudgetCounter, fit
from appliance.ingest.markdown_blocks import Block, LineIndex, timestamp_seconds

SECTION_CHAR_CAP = 4000
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
CRUMB_SHARE = 3   # a breadcrumb/label takes at most budget // 3 tokens
HEADER_SHARE = 2  # a repeated table header takes at most budget // 2 tokens


@dataclass(slots=True)
class Table:
    start: int            # offset of the header row in the document
    context: str          # what later chunks of the table repeat (header row + separator)


@dataclass(slots=True)
class Unit:
    """A contiguous run of source text that is cut in one way.

    kind: "text" (paragraph/list lines), "heading" (a heading line or slide marker),
    "theader" (a table's header + separator rows), "row" (one table row), "code"
    (a closed fenced block kept whole), "codesplit" (lines of a fenced block too big to
    keep whole).
    """

    kind: str
    start: int
    end: int
    table: Table | None = None
    group: int = -1


@dataclass(slots=True)
class Section:
    label: str
    parts: list[str]
    """The label's components, outermost first (headings of a breadcrumb)."""
    units: list[Unit] = field(default_factory=list)



def is_transcript(lines: LineIndex) -> list[int | None] | None:
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


def document_sections(md: str, lines: LineIndex, counter: BudgetCounter, budget: int,
              title: str | None, code_cap: int, syntax: str | None) -> list[Section]:
    stamps = is_transcript(lines)
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
    out: list[Section] = []
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


def _units(md: str, lines: LineIndex, blocks: list[Block], counter: BudgetCounter, budget: int,
           group: list[int], code_cap: int) -> list[Unit]:
    units: list[Unit] = []
    for b in blocks:
        start = lines.bounds(b.first)[0]
        end = lines.bounds(b.last)[1]
        if b.kind in ("heading", "slide"):
            units.append(Unit("heading", start, end))
        elif b.kind == "table":
            h0, h1 = lines.bounds(b.first)[0], lines.bounds(b.first + 1)[1]
            header_row = lines.line(b.first).strip()
            sep_row = lines.line(b.first + 1).strip()
            table = Table(h0, _table_context(header_row, sep_row, counter, budget))
            units.append(Unit("theader", h0, h1, table))
            for i in range(b.first + 2, b.last + 1):
                r0, r1 = lines.bounds(i)
                units.append(Unit("row", r0, r1, table))
        elif b.kind == "code":
            limit = code_cap - budget // CRUMB_SHARE - 1
            size = end - start
            whole = size <= limit * 16 and counter.count(md[start:end]) <= limit
            group[0] += 1
            if whole:
                units.append(Unit("code", start, end, group=group[0]))
            else:
                for i in range(b.first, b.last + 1):
                    r0, r1 = lines.bounds(i)
                    if md[r0:r1].strip():
                        units.append(Unit("codesplit", r0, r1, group=group[0]))
        else:
            units.append(Unit("text", start, end))
    return units


def _table_context(header: str, sep: str, counter: BudgetCounter, budget: int) -> str:
    cap = budget // HEADER_SHARE
    for candidate in (f"{header}\n{sep}", header):
        if counter.cached(candidate) <= cap:
            return candidate
    cut, _ = fit(header, 0, len(header), cap - counter.cached(" " + ELLIPSIS), counter,
                  words=True)
    return header[:cut].rstrip() + " " + ELLIPSIS


# --- the section cap -----------------------------------------------------------------


def _cap(md: str, label: str, parts: list[str], units: list[Unit]) -> list[Section]:
    """Cut a section over SECTION_CHAR_CAP at unit, row, line and sentence boundaries.

    The cap holds for the section as `section_text` returns it: its label line and, for a
    section that starts inside a table, the header row repeated at its top count too.
    """
    out = [Section(label, parts)]
    label_chars = len(label) + 1 if label else 0

    def size_with(u: Unit) -> int:
        cur = out[-1].units
        first = cur[0] if cur else u
        extra = len(first.table.context) + 1 if first.kind == "row" and first.table else 0
        return u.end - first.start + label_chars + extra

    def add(u: Unit) -> bool:
        if size_with(u) <= SECTION_CHAR_CAP:
            out[-1].units.append(u)
            return True
        return False

    def fresh(members: list[Unit]) -> None:
        if out[-1].units:
            out.append(Section(label, parts, []))
        out[-1].units.extend(members)

    def push(u: Unit) -> None:
        if not add(u):
            fresh([u])

    i = 0
    while i < len(units):
        u = units[i]
        if u.kind == "theader":  # a table moves as one unless it alone is over the cap
            j = i
            while j + 1 < len(units) and units[j + 1].kind == "row" and units[j + 1].table is u.table:
                j += 1
            whole = Unit("table", u.start, units[j].end)
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


def _cap_pieces(md: str, u: Unit, cap: int) -> list[Unit]:
    """A text run over the cap as lines, and lines over the cap as sentences."""
    out: list[Unit] = []
    pos = u.start
    while pos < u.end:
        nl = md.find("\n", pos, u.end)
        end = u.end if nl == -1 else nl
        if md[pos:end].strip():
            if end - pos <= cap:
                out.append(Unit(u.kind, pos, end, group=u.group))
            else:
                out.extend(Unit(u.kind, a, b, group=u.group)
                           for a, b in _sentences(md, pos, end, cap))
        pos = end + 1
    return out


def _sentences(md: str, start: int, end: int, cap: int) -> list[tuple[int, int]]:
    """Sentence spans of md[start:end], grouped greedily up to the cap."""
    out: list[tuple[int, int]] = []
    a = start
    last = start
    for m in SENTENCE_END.finditer(md, start, end):
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
