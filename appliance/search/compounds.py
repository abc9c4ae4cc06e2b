"""German compounds split into their parts, with Ding's German word list as the lexicon.

`Kühlmittelpumpe` is one token to BM25, so a passage that says `Pumpe für das
Kühlmittel` never met a question that says `Kühlmittelpumpe`, nor the reverse. The
keyword analyser therefore adds a compound's parts to its own stems, on both sides.
A split is accepted only when every part is a known German word of at least
MIN_PART letters (after an optional linking `s`, `es`, `n`, `en`, `e` or `er` on
all but the last part); among the accepted splits the one with the fewest parts
wins, then the one whose parts are most common in the dictionary (Koehn and
Knight's geometric mean). The analyser asks only for words the English dictionaries do not
know, so English text is not split into German.
"""
from __future__ import annotations

import math
from functools import lru_cache

from appliance.search import dictionaries

MIN_PART = 4
MIN_WORD = 2 * MIN_PART
LINKS = ("", "s", "es", "n", "en", "e", "er")
MAX_PARTS = 4


def parts(word: str, lexicon: dictionaries.Dictionaries) -> tuple[str, ...]:
    """The parts of a lower-case German compound, or () when `word` is not one."""
    if len(word) < MIN_WORD or not word.isalpha():
        return ()
    return _parts(lexicon, word)


@lru_cache(maxsize=100_000)
def _parts(lexicon: dictionaries.Dictionaries, word: str) -> tuple[str, ...]:
    best = _best(lexicon, word, MAX_PARTS, whole=False)
    return best[1] if best is not None else ()


@lru_cache(maxsize=100_000)
def _best(lexicon: dictionaries.Dictionaries, word: str, budget: int,
          whole: bool = True) -> tuple[float, tuple[str, ...]] | None:
    """(sum of log counts, parts) of the best split of `word` into at most `budget` known words
    (with `whole`, the word itself counts as a split into one part)."""
    candidates: list[tuple[float, tuple[str, ...]]] = []
    count = lexicon.word_count(word) if whole else 0
    if count and len(word) >= MIN_PART:
        candidates.append((math.log1p(count), (word,)))
    if budget > 1:
        for cut in range(MIN_PART, len(word) - MIN_PART + 1):
            head, rest = word[:cut], word[cut:]
            for link in LINKS:
                if link and not head.endswith(link):
                    continue
                stem = head[:len(head) - len(link)] if link else head
                head_count = lexicon.word_count(stem) if len(stem) >= MIN_PART else 0
                if not head_count:
                    continue
                tail = _best(lexicon, rest, budget - 1)
                if tail is not None:
                    candidates.append((math.log1p(head_count) + tail[0], (stem, *tail[1])))
    if not candidates:
        return None
    # the fewest parts (Kühlmittel|pumpe, not Kühl|mittel|pumpe), then the geometric mean of their counts
    return max(candidates, key=lambda c: (-len(c[1]), c[0] / len(c[1])))
