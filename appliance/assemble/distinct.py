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
from collections.abc import Mapping, Sequence

from appliance.chunks import StoredChunk
from appliance.results import Place

SAME_PASSAGE = 0.5
"""Share of the smaller passage's word 3-grams found in the other. Measured by
scripts/distinct_threshold.py: of 3,000 SciFact abstracts none lies more than 0.28 in any
other (median 0.03); copies re-cut 15% off at both ends with 3% of words damaged lie
0.66-0.85 in each other (median 0.77). 0.5 sits between the two."""
MIN_SHINGLES = 8
"""Passages shorter than this many 3-grams (a heading, a table cell) never collapse."""
COPIES_LISTED = 5
"""Copies a hit names in alsoIn, the best-ranked first; alsoInMore counts the rest. A passage kept in dozens of
files would otherwise fill the reply with places, and every place listed is a row read at every query."""
_WORD = re.compile(r"\w+", re.UNICODE)


Shingles = frozenset[tuple[str, ...]]
"""A passage's lower-case word 3-grams."""


def shingles(text: str) -> Shingles:
    words = list(map(str.casefold, _WORD.findall(text)))
    return frozenset(zip(words, words[1:], words[2:], strict=False))  # every run of three words


def shingled(bodies: Mapping[str, str], by_text: dict[str, Shingles]) -> dict[str, Shingles]:
    """Each passage's `shingles`, by id. Passages of the same text (one file kept in two folders, a repeated
    footer) share theirs, made once: `by_text` holds them through a search's rounds. Where copies fill the ranked
    lists, most of the passages a search compares are such (at 1M chunks of scripts/bench_scale.py's corpus, 33
    distinct texts among the 116 passages of a query)."""
    out: dict[str, Shingles] = {}
    for cid, body in bodies.items():
        grams = by_text.get(body)
        if grams is None:
            grams = by_text[body] = shingles(body)
        out[cid] = grams
    return out


def same_passage(a: Shingles, b: Shingles) -> bool:
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    if len(small) < MIN_SHINGLES:
        return False
    return small is large or len(small & large) >= SAME_PASSAGE * len(small)


def distinct(ids: Sequence[str], grams: Mapping[str, Shingles], limit: int) -> tuple[list[str], dict[str, list[str]]]:
    """(The first `limit` of `ids` whose passages are distinct, in rank order; kept id -> the ids of its copies
    among `ids`, in rank order), from each passage's `shingles` (`grams`): the search takes them from the texts its
    ranked lists carry, once per candidate however often it widens, and reads the rows of only the hits it
    keeps and their copies."""
    kept: list[tuple[str, Shingles]] = []
    copies: dict[str, list[str]] = {}
    for cid in ids:
        body = grams[cid]
        twin = next((k for k, s in kept if same_passage(body, s)), None)
        if twin is not None:
            copies.setdefault(twin, []).append(cid)
        elif len(kept) < limit:
            kept.append((cid, body))
    ids_kept = [k for k, _ in kept]
    return ids_kept, {k: copies[k] for k in ids_kept if k in copies}


def place(chunk: StoredChunk) -> Place:
    """Where a copy of a passage lies."""
    return Place(source=chunk.source_id, display_path=chunk.path, chunk_index=chunk.chunk_index,
                 start_line=chunk.start_line, end_line=chunk.end_line, page_start=chunk.page_start,
                 page_end=chunk.page_end, slide=chunk.slide, sheet=chunk.sheet)
