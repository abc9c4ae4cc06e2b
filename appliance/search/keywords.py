"""Keyword analysis shared by the BM25 index and BM25 queries.

LanceDB's FTS stems in exactly one language per index, and our corpora mix
English, German and Russian. So we analyse text ourselves and index the result
with a plain whitespace tokenizer: every word is lower-cased (ё folded to е),
Cyrillic words get the Russian Snowball stem, Latin words both the English and
the German stem (a word is not labelled with its language, and emitting both
stems costs a little BM25 precision but lets "Katzen" find "Katze" and
"running" find "runs"). Identifiers such as ERR_ZORBLATT_7741 are kept whole
and also split at underscores, so either spelling finds them. The query side
runs the same function, so both sides always agree.
"""
from __future__ import annotations

import re
from functools import lru_cache

from appliance.search import compounds, dictionaries
from appliance.search.stemming import STEMMERS, STOP_WORDS, stem

_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LATIN = re.compile(r"[a-zßäöüà-ÿ]")
MAX_TOKEN_CHARS = 40
"""LanceDB drops longer tokens; we cut them so a long identifier still matches by its prefix."""

def _terms(word: str) -> tuple[str, ...]:
    return _cached_terms(word, dictionaries.active())


@lru_cache(maxsize=200_000)
def _cached_terms(word: str, lexicon: dictionaries.Dictionaries | None) -> tuple[str, ...]:
    """The word's stems, and its compound parts' under `lexicon` (part of the key: the parts depend on it)."""
    if word.isdigit() or not (_CYRILLIC.search(word) or _LATIN.search(word)):
        return (word,)
    if _CYRILLIC.search(word):
        stems = {STEMMERS["russian"].stemWord(word)}
    else:
        stems = {STEMMERS["english"].stemWord(word), STEMMERS["german"].stemWord(word)}
    return tuple(sorted(s for s in stems if s)) + tuple(stem(part, "de") for part in _parts(word, lexicon))


def compound_parts(word: str) -> tuple[str, ...]:
    """The parts of `word` when it is a German compound (appliance.search.compounds), else ()."""
    return _parts(word, dictionaries.active())


def _parts(word: str, lexicon: dictionaries.Dictionaries | None) -> tuple[str, ...]:
    if lexicon is None or lexicon.knows(stem(word, "en"), "en"):
        return ()
    return compounds.parts(word, lexicon)


def analyze(text: str) -> list[str]:
    """Index terms for `text`, in order of appearance (duplicates kept for term frequency).

    Stop words are dropped, and so a query of stop words alone has no keyword side."""
    out: list[str] = []
    for match in _WORD.finditer(text.lower().replace("ё", "е")):
        word = match.group()[:MAX_TOKEN_CHARS]
        if word in STOP_WORDS:
            continue
        parts = [p for p in word.split("_") if p] if "_" in word else []
        if len(parts) > 1:
            out.append(word)
            for part in parts:
                out.extend(_terms(part))
        elif parts or word.strip("_"):
            out.extend(_terms(parts[0] if parts else word))
    return out


def keywords_field(title: str | None, text: str) -> str:
    """The analysed string stored in the `keywords` column: title terms, then text terms."""
    return " ".join(analyze(title or "") + analyze(text))


def query_terms(query: str) -> str:
    """The analysed BM25 query: unique terms, space-separated (OR semantics)."""
    return " ".join(dict.fromkeys(analyze(query)))


