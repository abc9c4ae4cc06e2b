"""Distinct passages: near-identical hits collapse into the best-ranked one.

The same passage often lives in several files (a PDF and its DOCX export, a scan and
its transcription, a page copied into two notes). Without this, three of the top five
hits can be one paragraph. Passages are compared by their own text (the chunk body,
without the heading breadcrumb that differs per file), reduced to lower-case word
3-grams; two are the same passage when the smaller one's 3-grams lie at least
SAME_PASSAGE in the other's. Chunk boundaries differ between two conversions of one
document, so the measure is containment, not equality.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from appliance.chunks import RankedChunk, StoredChunk
from appliance.results import Place

SAME_PASSAGE = 0.5
"""Share of the smaller passage's word 3-grams found in the other. Measured by
scripts/distinct_threshold.py: of 3,000 SciFact abstracts none lies more than 0.28 in any
other (median 0.03); copies re-cut 15% off at both ends with 3% of words damaged lie
0.66-0.85 in each other (median 0.77). 0.5 sits between the two."""
MIN_SHINGLES = 8
"""Passages shorter than this many 3-grams (a heading, a table cell) never collapse."""
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Collapsed:
    kept: list[RankedChunk]
    also_in: dict[str, list[Place]]
    """id of a kept hit -> where else its passage was found, in rank order."""


def shingles(text: str) -> frozenset[tuple[str, ...]]:
    words = list(map(str.casefold, _WORD.findall(text)))
    return frozenset(zip(words, words[1:], words[2:], strict=False))  # every run of three words


def same_passage(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> bool:
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    if len(small) < MIN_SHINGLES:
        return False
    return len(small & large) >= SAME_PASSAGE * len(small)


def collapse(hits: Sequence[RankedChunk], limit: int) -> Collapsed:
    """The first `limit` distinct passages of `hits` (in rank order), each naming its copies."""
    kept: list[tuple[RankedChunk, frozenset[tuple[str, ...]]]] = []
    also_in: dict[str, list[Place]] = {}
    for hit in hits:
        body = shingles(hit.chunk.body)
        twin = next((k for k, s in kept if same_passage(body, s)), None)
        if twin is not None:
            also_in.setdefault(twin.id, []).append(_where(hit.chunk))
        elif len(kept) < limit:
            kept.append((hit, body))
    ids = {k.id for k, _ in kept}
    return Collapsed([k for k, _ in kept], {k: v for k, v in also_in.items() if k in ids})


def _where(chunk: StoredChunk) -> Place:
    return Place(source=chunk.source_id, display_path=chunk.path, chunk_index=chunk.chunk_index,
                 start_line=chunk.start_line, end_line=chunk.end_line, page_start=chunk.page_start,
                 page_end=chunk.page_end, slide=chunk.slide, sheet=chunk.sheet)
