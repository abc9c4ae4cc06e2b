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

import re
from collections.abc import Sequence

from appliance.chunks import Chunk, TokenCounter
from appliance.ingest.chunk_fit import BudgetCounter
from appliance.ingest.chunk_pack import CODE_SPLIT_MARKER, Packer
from appliance.ingest.chunk_places import blank_markers
from appliance.ingest.chunk_sections import HEADER_SHARE, SECTION_CHAR_CAP, document_sections, is_transcript
from appliance.ingest.markdown_blocks import LineIndex, parse_blocks

SCHEME_VERSION = "structure-v2"
"""v2: page/sheet marker lines are blanked out of chunk text and recorded as each chunk's
page range, sheet and slide (`Chunk.page_start` etc.)."""
CODE_BLOCK_BUDGETS = 4
"""A closed fenced code block stays in one chunk up to this many budgets."""
MIN_BUDGET = 16
_WS_RUN = re.compile(r"\s+")


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
    counter = BudgetCounter(count_tokens)
    code_cap = code_block_cap(budget, ceiling)
    sections = document_sections(markdown, lines, counter, budget, title, code_cap, syntax)
    return Packer(markdown, lines, counter, budget, code_cap, locs).run(sections)


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
    if is_transcript(lines) is None:
        for b in parse_blocks(lines):
            if b.kind != "table":
                continue
            header = lines.line(b.first).strip()
            if count_tokens(header) > budget // HEADER_SHARE:
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


__all__ = [
    "CODE_BLOCK_BUDGETS",
    "CODE_SPLIT_MARKER",
    "MIN_BUDGET",
    "SCHEME_VERSION",
    "SECTION_CHAR_CAP",
    "audit",
    "chunk_document",
    "code_block_cap",
    "collapse_whitespace",
    "reconstruct",
    "section_text",
]
