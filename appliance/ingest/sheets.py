"""Workbook Markdown that reads like tables: markitdown's sheets (pandas underneath) tidied.

pandas names a column without a header `Unnamed: N` and writes an empty cell as `NaN`; a sheet
whose first row is a title ("Number of ducks per year") gets that title as its header, and the
real header row becomes data. Over a real folder that made chunks of `Unnamed: 1 | NaN` noise,
tables whose repeated header (the chunker puts it before every row group) was a title, and
empty sheets that were a heading alone. Here, per sheet: empty cells are empty, columns and rows
with nothing in them go, title rows above the header become text, and a sheet with no cell
left goes entirely.
"""
from __future__ import annotations

import re

_SHEET = re.compile(r"(?m)^(?=## )")
_UNNAMED = re.compile(r"Unnamed: \d+(?:_level_\d+)?")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_RULE = re.compile(r":?-{3,}:?")


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip() for c in _CELL_SPLIT.split(inner)]


def _filled(row: list[str]) -> int:
    return sum(1 for c in row if c)


def tidy_table(lines: list[str]) -> list[str]:
    """The lines of one sheet's Markdown table tidied (see the module docstring); [] when nothing is left."""
    rows = [row for row in map(_cells, lines) if not all(_RULE.fullmatch(c) for c in row)]  # no |---| rows
    rows = [["" if c == "NaN" or (k == 0 and _UNNAMED.fullmatch(c)) else c for c in row] for k, row in enumerate(rows)]
    rows = [row for row in rows if _filled(row)]
    width = max((len(row) for row in rows), default=0)
    rows = [row + [""] * (width - len(row)) for row in rows]
    keep = [i for i in range(width) if any(row[i] for row in rows)]
    rows = [[row[i] for i in keep] for row in rows]
    if not rows:
        return []
    text: list[str] = []
    while len(keep) > 1 and len(rows) > 1 and _filled(rows[0]) <= 1:
        text.append(next(c for c in rows.pop(0) if c))  # a title over the table, not its header
    out = [line for t in text for line in (t, "")]
    out.append("| " + " | ".join(rows[0]) + " |")
    out.append("|" + " --- |" * len(keep))
    out.extend("| " + " | ".join(row) + " |" for row in rows[1:])
    return out


def tidy_workbook(markdown: str) -> str:
    """markitdown's workbook Markdown (`## Sheet` then its table, per sheet) with every sheet tidied.
    A sheet with no cell left is dropped, and so is one holding only a header whose columns all head
    another sheet that has rows (an empty template of it): those rows carry the same words, and the
    short chunk of bare column names outranked them (tests/integration/test_sheet_ranking.py)."""
    parts: list[str] = []
    bare: dict[int, set[str]] = {}  # part index -> the columns of a sheet that is a header alone
    headers: list[set[str]] = []  # the columns of each sheet with rows
    for part in _SHEET.split(markdown):
        if not part.startswith("## "):
            parts.append(part)
            continue
        heading, _, body = part.partition("\n")
        table = [line for line in body.split("\n") if line.lstrip().startswith("|")]
        other = [line for line in body.split("\n") if line.strip() and not line.lstrip().startswith("|")]
        tidy = tidy_table(table) if len(table) >= 2 else []
        if not tidy and not other:
            continue
        grid = [line for line in tidy if line.startswith("|")]  # the header, its |---| rule, the rows
        if grid:
            columns = {c.casefold() for c in _cells(grid[0])}
            if len(grid) > 2:
                headers.append(columns)
            elif len(tidy) == 2 and not other:
                bare[len(parts)] = columns
        parts.append("\n".join([heading, *other, *tidy]) + "\n\n")
    drop = {i for i, columns in bare.items() if any(columns <= h for h in headers)}
    return "".join(p for i, p in enumerate(parts) if i not in drop).rstrip("\n") + "\n"
