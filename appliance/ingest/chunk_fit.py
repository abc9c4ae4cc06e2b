"""Cutting text to a token budget with few token counts.

The model's tokenizer is the only judge of a chunk's size, and it is slow on long strings:
these helpers count budget-sized windows only, steered by a running chars-per-token estimate.
"""
from __future__ import annotations

import re
import unicodedata

from appliance.chunks import TokenCounter

ELLIPSIS = "…"
SENTENCE_END = re.compile(r"[.!?…;:。！？；](?:[\"'”’»)\]]*)(?=\s)|[。！？；]")


class BudgetCounter:
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


def _safe_cut(text: str, pos: int, lo: int) -> int:
    """Move a character cut back so it does not separate a mark or joiner from its base."""
    while pos > lo + 1 and pos < len(text) and (
            unicodedata.combining(text[pos]) or text[pos] in "\u200d\ufe0f\ufe0e"
            or text[pos - 1] == "\u200d" or 0x1F3FB <= ord(text[pos]) <= 0x1F3FF):
        pos -= 1
    return pos


def fit(text: str, a: int, end: int, limit: int, counter: BudgetCounter, *,
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
        for m in SENTENCE_END.finditer(text, a + good // 2, cut):
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
