"""Headings of the text formats that are not Markdown, for the structure-first chunker.

A file recognised as text by its content (a README, NEWS, copyright, .rst, .adoc, .org,
.tex, a man page, code) is indexed verbatim: line N of the indexed text is line N of the
file. Its syntax (`syntax_of`) says which lines are headings, and `blocks` gives the
chunker the same Block list markdown_blocks gives it for Markdown:

* "text" and "rst": reStructuredText section titles, which plain-text READMEs and NEWS
  files use too: a one-line title under (and maybe over) a line of one repeated
  punctuation character; each new adornment style is one level deeper;
* "asciidoc": `= Title`, `== Section`; "org": `* Heading`, `** Sub`;
* "latex": `\\chapter{}`, `\\section{}` ...; "roff": `.SH` and `.SS`;
* "markdown": a README without an extension that is Markdown (ATX headings).
"""
from __future__ import annotations

import re
from pathlib import Path

from appliance.ingest.markdown_blocks import Block, LineIndex, parse_blocks, with_paragraphs

SYNTAX_BY_EXTENSION: dict[str, str] = {
    ".rst": "rst", ".rest": "rst", ".adoc": "asciidoc", ".asciidoc": "asciidoc", ".asc": "asciidoc",
    ".org": "org", ".tex": "latex", ".ltx": "latex", ".man": "roff", ".roff": "roff", ".me": "roff",
    ".ms": "roff", ".md": "markdown", ".markdown": "markdown", ".mdown": "markdown", ".mkd": "markdown",
    **{f".{n}": "roff" for n in range(1, 10)},
}
_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1{2,}[ \t]*")
_ATX = re.compile(r"^#{1,6}[ \t]+\S", re.M)
_ASCIIDOC = re.compile(r"^(={1,6})[ \t]+(\S.*?)[ \t]*$")
_ORG = re.compile(r"^(\*{1,6})[ \t]+(\S.*?)[ \t]*$")
_LATEX = re.compile(r"^[ \t]*\\(part|chapter|section|subsection|subsubsection|paragraph)\*?\{([^}\n]+)\}")
_LATEX_LEVELS = {"part": 1, "chapter": 1, "section": 2, "subsection": 3, "subsubsection": 4, "paragraph": 5}
_ROFF = re.compile(r"^\.(SH|SS)[ \t]+(.+?)[ \t]*$")


def syntax_of(name: str, text: str) -> str:
    """The syntax of a text file named `name` (without .gz): by its extension, else by its first lines."""
    by_name = SYNTAX_BY_EXTENSION.get(Path(name).suffix.lower())
    if by_name:
        return by_name
    head = text[:65536]
    first = head.lstrip().split("\n", 1)[0]
    if first.startswith((".TH ", '.\\"', "'\\\"")) or "\n.SH " in head:
        return "roff"
    if first.startswith("#!"):
        return "text"  # a script: its comments are no headings
    if re.match(r"#\+title:", first, re.I) or "-*- mode: org -*-" in first.lower():
        return "org"
    if _ASCIIDOC.match(first) and re.search(r"^==[ \t]+\S", head, re.M):
        return "asciidoc"
    atx = len(_ATX.findall(head))
    lines = sum(1 for line in head.split("\n") if line.strip())
    if atx >= 2 and atx * 3 <= lines and ("```" in head or "](" in head or "\n## " in head):
        return "markdown"
    return "text"


def _line_heading(syntax: str, line: str) -> tuple[int, str] | None:
    m: re.Match[str] | None
    if syntax == "asciidoc":
        m = _ASCIIDOC.match(line)
        return (len(m.group(1)), m.group(2)) if m else None
    if syntax == "org":
        m = _ORG.match(line)
        return (len(m.group(1)), m.group(2)) if m else None
    if syntax == "latex":
        m = _LATEX.match(line)
        return (_LATEX_LEVELS[m.group(1)], m.group(2).strip()) if m else None
    if syntax == "roff":
        m = _ROFF.match(line)
        return (1 if m.group(1) == "SH" else 2, m.group(2).strip('"').strip()) if m else None
    return None


def _adornment(line: str) -> str | None:
    return line[0] if _ADORNMENT.fullmatch(line) else None


def _rst_headings(lines: LineIndex) -> list[Block]:
    """Section titles: a one-line title over an adornment at least about as long as it, with a blank
    line (or an overline of the same character) before it."""
    out: list[Block] = []
    styles: list[tuple[str, bool]] = []
    n = len(lines)
    text = [lines.line(i) for i in range(n)]
    i = 1
    while i < n:
        char = _adornment(text[i])
        title = text[i - 1]
        if char is None or not title.strip() or title[0] in " \t" or _adornment(title) is not None:
            i += 1
            continue
        over = i >= 2 and text[i - 2].rstrip() == text[i].rstrip()
        if not over and i >= 2 and text[i - 2].strip():
            i += 1
            continue  # a paragraph's last line over a rule is no title
        if len(text[i].rstrip()) < min(len(title.rstrip()), 3) or len(text[i].rstrip()) * 2 < len(title.rstrip()):
            i += 1
            continue
        style = (char, over)
        if style not in styles:
            styles.append(style)
        level = min(styles.index(style) + 1, 6)
        out.append(Block("heading", i - 2 if over else i - 1, i, level=level, title=title.strip()))
        i += 2
    return out


def headings(lines: LineIndex, syntax: str) -> list[Block]:
    """The heading blocks of a text in `syntax` (not Markdown), in order."""
    if syntax in ("text", "rst"):
        return _rst_headings(lines)
    out = []
    for i in range(len(lines)):
        found = _line_heading(syntax, lines.line(i))
        if found:
            out.append(Block("heading", i, i, level=found[0], title=found[1]))
    return out


def blocks(lines: LineIndex, syntax: str | None) -> list[Block]:
    """Headings and paragraphs of the text, as the chunker reads them; Markdown (or no syntax
    given) through markdown_blocks."""
    if syntax is None or syntax == "markdown":
        return parse_blocks(lines)
    return with_paragraphs(lines, headings(lines, syntax))


def first_heading(text: str, syntax: str) -> str | None:
    """The first heading's text, or None."""
    if syntax == "markdown":
        return None  # titles.choose_title reads Markdown itself
    found = headings(LineIndex.of(text), syntax)
    return found[0].title if found else None
