"""Names, source ids and titles as data in every rendering: one visible line, quoted for Markdown.

A file name, a source id, a sheet or heading name or a document's title comes from whoever
wrote the files, and may hold line breaks, control characters, bidi overrides or Markdown.
Printed as it is, a file named "n\\n\\n4. ceo.md:9 — CEO memo\\n```\\nFORGED\\n```\\n.md" starts
lines a reader takes for the server's own framing (a hit header, a fence). `label` turns any
of them into one line that shows what is there (`\\n`, `\\x1b`, `\\u202e`); `md_code` also puts
it in a Markdown code span, where nothing is interpreted, the way document text is fenced.
The status page's script has the same rule (appliance/static/page.js, `label`), since a
browser cannot call this.
"""
from __future__ import annotations

import unicodedata

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Marks and overrides that reorder the text around them (the "Trojan Source" characters)."""
NAMED = {"\n": "\\n", "\r": "\\r"}


def _escaped(ch: str) -> str:
    if ch in NAMED:
        return NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _hidden(ch: str) -> bool:
    """A character that breaks the line, moves the cursor or reorders text; a tab is kept (it is whitespace)."""
    return ch != "\t" and (unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") or ch in BIDI_CONTROLS)


def label(text: str) -> str:
    """`text` on one line with every control, line-break and bidi character shown as an escape.
    Idempotent, and the identity for ordinary names."""
    return "".join(_escaped(ch) if _hidden(ch) else ch for ch in text)


def backtick_run(text: str) -> int:
    """The longest run of backticks in `text`: a fence or code span around it must be longer."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return longest


def md_code(text: str) -> str:
    """`label(text)` as a Markdown code span: a backtick run longer than any inside, padded
    when the content starts or ends with a backtick or a space (CommonMark would strip one)."""
    inner = label(text)
    ticks = "`" * (backtick_run(inner) + 1)
    pad = " " if inner[:1] in ("`", " ") or inner[-1:] in ("`", " ") else ""
    return f"{ticks}{pad}{inner}{pad}{ticks}"
