"""Convert Debian's bilingual dictionaries into the compact lookups the keyword side reads.

Bake time only. The packages' raw formats (Ding's `de :: en` lines, dictd databases)
are turned into one small text file per language pair: a sorted line per source
stem, `stem<TAB>target:weight target:weight ...`, where stems are exactly the
keyword analyser's (appliance.search.stemming.stem) so a lookup needs no parsing of the
dictionaries at run time. A weight is the share of the source's dictionary senses
that name the target, first-listed senses counting more; only the strongest few
targets are kept (ambiguous words would otherwise drown a query). A German word
list with counts (the compound splitter's lexicon) comes from Ding's headwords.
The output is plain text in a fixed order, so a bake is byte-for-byte repeatable.
"""
from __future__ import annotations

import gzip
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

from appliance.search.stemming import STOP_WORDS, stem

PAIRS = ("de-en", "en-de", "en-ru", "ru-en", "de-ru", "ru-de")
"""Every direction a bake writes, source language first."""
LEXICON = "de-words.tsv"

KEEP_TARGETS = 6
"""Targets kept per source stem; later ones carry little weight and most of the noise."""
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\([^)]*\)|<[^>]*>|/[^/]*/")
_WORD_ONLY = re.compile(r"^[^\W\d_]{2,}$")
_CYRILLIC_WORD = re.compile(r"^[\u0400-\u04ff]{2,}$")
_LATIN = re.compile(r"[a-zA-Z]")

Counts = dict[str, dict[str, float]]
"""source stem -> target stem -> summed evidence."""


def _clean(phrase: str) -> list[str]:
    """The words of a dictionary phrase without its annotations ({f}, [med.], (sth.), /ipa/)."""
    return _ANNOTATION.sub(" ", phrase).replace("’", "'").split()


def _single(phrase: str, lang: str) -> tuple[str, int] | None:
    """The stem of a one-word phrase in `lang` and the word's length, or None (phrases, stop words, numbers)."""
    words = _clean(phrase)
    if len(words) != 1:
        return None
    word = words[0].strip(".,;:!?'\"").lower().replace("ё", "е")
    if not _WORD_ONLY.match(word) or word in STOP_WORDS:
        return None
    if (lang == "ru") != bool(_CYRILLIC_WORD.match(word)):
        return None
    stemmed = stem(word, lang)
    return (stemmed, len(word)) if stemmed else None


def _target(phrase: str, lang: str) -> str | None:
    found = _single(phrase, lang)
    return found[0] if found else None


class Evidence:
    """Summed source->target weights, where an entry whose headword is longer than the shortest
    headword of its stem (`watered` beside `water`) counts DERIVED: the base form's senses lead."""

    DERIVED = 0.3

    def __init__(self) -> None:
        self.entries: list[tuple[str, int, str, float]] = []

    def add(self, source: tuple[str, int], target: str, weight: float) -> None:
        self.entries.append((source[0], source[1], target, weight))

    def counts(self) -> Counts:
        shortest: dict[str, int] = {}
        for source, length, _, _ in self.entries:
            shortest[source] = min(length, shortest.get(source, length))
        counts: Counts = defaultdict(dict)
        for source, length, target, weight in self.entries:
            share = weight * (1.0 if length == shortest[source] else self.DERIVED)
            counts[source][target] = counts[source].get(target, 0.0) + share
        return counts


def ding(text: str) -> tuple[Counts, dict[str, int]]:
    """de->en evidence from Ding's `de | de :: en | en` lines, and German headword counts.

    Sub-entries (`|`) are aligned across `::`; within one, synonyms are `;`-separated.
    The first sub-entry is the line's main sense (weight 1), later ones examples (0.5)."""
    evidence = Evidence()
    words: dict[str, int] = defaultdict(int)
    for line in text.splitlines():
        if line.startswith("#") or "::" not in line:
            continue
        left, _, right = line.partition("::")
        for position, (de, en) in enumerate(zip(left.split("|"), right.split("|"), strict=False)):
            sources = [s for s in (_single(p, "de") for p in de.split(";")) if s]
            targets = [t for t in (_target(p, "en") for p in en.split(";")) if t]
            for surface in (_clean(p) for p in de.split(";")):
                if len(surface) == 1 and _WORD_ONLY.match(surface[0]):
                    words[surface[0].lower()] += 1
            weight = 1.0 if position == 0 else 0.5
            for source in sources:
                for rank, target in enumerate(targets):
                    evidence.add(source, target, weight / (1 + rank))
    return evidence.counts(), words


def dictd_entries(index: str, data: bytes) -> Iterator[tuple[str, str]]:
    """(headword, body) of every entry of a dictd database (its .index and uncompressed .dict)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def number(code: str) -> int:
        value = 0
        for char in code:
            value = value * 64 + alphabet.index(char)
        return value

    for line in index.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database"):
            continue
        start, length = number(parts[1]), number(parts[2])
        yield parts[0], data[start:start + length].decode("utf-8", "replace")


_SENSE_MARK = re.compile(r"^(?:\d+[.)]|[а-яa-z][).]|_[\w-]+\.|\s)+", re.UNICODE)


def cyrillic_senses(body: str) -> list[str]:
    """The single Cyrillic words a dictd body gives as translations, in order (lines with Latin
    text, i.e. examples and German glosses, are skipped; markers such as `1)`, `_n.` dropped)."""
    found: list[str] = []
    for raw in body.splitlines()[1:]:
        line = re.sub(r"_[\w-]+\.", " ", _ANNOTATION.sub(" ", raw))
        for piece in (p for segment in line.split(";") if not _LATIN.search(segment)
                      for p in segment.split(",")):
            piece = _SENSE_MARK.sub("", piece.strip()).strip(" .!?")
            if _CYRILLIC_WORD.match(piece.lower()):
                found.append(piece.lower())
    return found


def dictd_counts(entries: Iterable[tuple[str, str]], source_lang: str) -> Counts:
    """source->ru evidence from a dictd dictionary whose bodies list Russian words."""
    evidence = Evidence()
    for headword, body in entries:
        source = _single(headword, source_lang)
        if source is None:
            continue
        seen: list[str] = []
        for word in cyrillic_senses(body):
            target = _target(word, "ru")
            if target and target not in seen:
                seen.append(target)
        for rank, target in enumerate(seen):
            evidence.add(source, target, 1.0 / (1 + rank))
    return evidence.counts()


def reverse(counts: Counts) -> Counts:
    out: Counts = defaultdict(dict)
    for source, targets in counts.items():
        for target, weight in targets.items():
            out[target][source] = out[target].get(source, 0.0) + weight
    return out


def render(counts: Counts) -> str:
    """The lookup's text: per source stem its strongest targets with weights summing to 1 (2 decimals)."""
    lines = []
    for source in sorted(counts):
        ranked = sorted(counts[source].items(), key=lambda kv: (-kv[1], kv[0]))[:KEEP_TARGETS]
        total = sum(weight for _, weight in ranked)
        cells = [f"{target}:{weight / total:.2f}" for target, weight in ranked]
        lines.append(source + "\t" + " ".join(cells))
    return "".join(line + "\n" for line in lines)


def render_lexicon(words: dict[str, int]) -> str:
    return "".join(f"{word}\t{count}\n" for word, count in sorted(words.items()) if len(word) >= 3)


def convert(ding_file: Path, mueller: tuple[Path, Path], deu_rus: tuple[Path, Path], out: Path) -> list[str]:
    """Write every pair's lookup and the German lexicon into `out`; the names written."""
    de_en, words = ding(ding_file.read_text(encoding="utf-8"))

    def database(pair: tuple[Path, Path]) -> Iterator[tuple[str, str]]:
        index, data = pair
        raw = data.read_bytes()
        return dictd_entries(index.read_text(encoding="utf-8"), gzip.decompress(raw) if data.suffix == ".dz" else raw)

    en_ru = dictd_counts(database(mueller), "en")
    de_ru = dictd_counts(database(deu_rus), "de")
    tables = {"de-en": de_en, "en-de": reverse(de_en), "en-ru": en_ru, "ru-en": reverse(en_ru),
              "de-ru": de_ru, "ru-de": reverse(de_ru)}
    for pair in PAIRS:
        (out / f"{pair}.tsv").write_text(render(tables[pair]), encoding="utf-8")
    (out / LEXICON).write_text(render_lexicon(words), encoding="utf-8")
    return [f"{pair}.tsv" for pair in PAIRS] + [LEXICON]

