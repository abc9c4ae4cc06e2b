"""Packing a section's units into chunks within the token budget.

Units become pieces of known token counts (a unit over the budget is cut at sentences,
then words), and successive pieces fill a chunk behind its context prefix: the section's
label line, a table's repeated header row, the marker of a split code block.
"""
from __future__ import annotations

from dataclasses import dataclass

from appliance.chunks import Chunk
from appliance.ingest.chunk_fit import ELLIPSIS, BudgetCounter, fit
from appliance.ingest.chunk_places import Locations
from appliance.ingest.chunk_sections import CRUMB_SHARE, Section, Table, Unit
from appliance.ingest.markdown_blocks import LineIndex

CODE_SPLIT_MARKER = "[code block split to fit the token budget]"
PAGE_BREAK_SHARE = 2
"""A page break ends a chunk holding at least budget // 2 tokens, so most chunks cite one page,
while pages of a few words (slides printed as PDF, a 10,000-page file of one line each) still
share chunks instead of becoming one tiny unit each."""


@dataclass(slots=True)
class _Piece:
    start: int
    end: int
    tokens: int
    kind: str
    table: Table | None = None
    group: int = -1

    @property
    def glue(self) -> bool:
        """Must not end a chunk when something could follow it."""
        return self.kind in ("heading", "theader")


def _split_to_pieces(md: str, a: int, end: int, limit: int, counter: BudgetCounter, kind: str, *,
                     sentences: bool, table: Table | None = None, group: int = -1,
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
            cut, known = fit(md, a, end, lim, counter, words=True, sentences=sentences)
            stop = cut
            while stop > a and md[stop - 1].isspace():
                stop -= 1
            tokens = known if known is not None else counter.count(md[a:stop])
            if tokens <= lim or cut - a <= 1:
                break
            lim = max(1, lim - max(1, tokens - limit))
        out.append(_Piece(a, stop, tokens, kind, table, group))
        a = cut


def _elide(parts: list[str], cap: int, counter: BudgetCounter) -> str:
    """The breadcrumb within `cap` tokens: drop middle headings, then shorten."""
    parts = [p for p in parts if p]
    if not parts:
        return ""
    full = " > ".join(parts)
    if counter.cached(full) <= cap:
        return full
    for keep in range(len(parts) - 2, 0, -1):
        text = " > ".join([parts[0], ELLIPSIS, *parts[-keep:]])
        if counter.cached(text) <= cap:
            return text
    room = cap - counter.cached(" " + ELLIPSIS)
    if room > 0:
        cut, _ = fit(full, 0, len(full), room, counter, words=True)
        text = full[:cut].rstrip() + " " + ELLIPSIS
        if counter.cached(text) <= cap:
            return text
    return ""


class Packer:
    def __init__(self, md: str, lines: LineIndex, counter: BudgetCounter, budget: int, code_cap: int,
                 locs: Locations) -> None:
        self.md, self.lines, self.counter, self.budget, self.code_cap = md, lines, counter, budget, code_cap
        self.locs = locs
        self.chunks: list[Chunk] = []

    def run(self, sections: list[Section]) -> list[Chunk]:
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

    def _pieces(self, label_line: str, units: list[Unit]) -> list[_Piece]:
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

    def _section(self, ordinal: int, section: Section) -> None:
        counter, budget = self.counter, self.budget
        label_line = _elide(section.parts, budget // CRUMB_SHARE, counter)
        if section.label and not label_line:
            label_line = ELLIPSIS  # keeps the label line's place for section_text
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
