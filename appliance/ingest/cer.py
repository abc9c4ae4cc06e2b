"""Character error rate of recognised text against a ground truth (for tests and benchmarks)."""
from __future__ import annotations

import re
import unicodedata


def normalise(text: str) -> str:
    """NFC, every run of whitespace as one space, trimmed."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", text)).strip()


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insert, delete, substitute; cost 1 each), O(len(a)*len(b)) time, O(len(b)) memory."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def cer(recognised: str, truth: str) -> float:
    """Edits needed to turn the recognised text into the truth, per truth character."""
    r, t = normalise(recognised), normalise(truth)
    if not t:
        return 0.0 if not r else 1.0
    return levenshtein(r, t) / len(t)
