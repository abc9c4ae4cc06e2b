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

import Stemmer

from appliance import compounds, dictionaries

_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LATIN = re.compile(r"[a-zßäöüà-ÿ]")
MAX_TOKEN_CHARS = 40
"""LanceDB drops longer tokens; we cut them so a long identifier still matches by its prefix."""

_STEMMERS = {lang: Stemmer.Stemmer(lang) for lang in ("english", "german", "russian")}
_STEMMER_OF = {"en": _STEMMERS["english"], "de": _STEMMERS["german"], "ru": _STEMMERS["russian"]}

# Function words carry no topic. Under rank fusion a document that shares only
# "the" or "und" with a query would still earn a keyword rank and outrank a
# better cross-language match, so they are dropped on both sides.
STOP_WORDS_BY_LANGUAGE = {lang: frozenset(words.replace("ё", "е").split()) for lang, words in {
    "en": """
a about above after again all also am an and any are as at be been before being below between both but by
can could did do does doing down during each few for from further had has have having he her here hers him
his how i if in into is it its itself just me more most my no nor not of off on once only or other our out
over own same she should so some such than that the their them then there these they this those through to
too under until up very was we were what when where which while who whom why will with would you your
""",
    "de": """
aber als am an auch auf aus bei bin bis bist da damit dann das dass dem den denn der des die dies diese
dieser dieses doch dort du durch ein eine einem einen einer eines er es etwas für hat hatte ich ihr ihre im
in ist ja jede jedem jeden jeder kann kein keine man mich mir mit muss nach nicht noch nun nur ob oder ohne
sich sie sind so soll über um und uns unter vom von vor war waren was weil wenn wer wie wir wird wo zu zum zur
wann wurde wurden werden worden haben hatten sein seine seinen seiner seinem ihrem ihren
""",
    "ru": """
а без более бы был была были было быть в вам вас весь во вот все всего всех вы где да даже для до его ее
ей ему если есть еще же за здесь и из или им их к как ко когда кто ли либо мне может мы на над надо наш не
него нее нет ни них но ну о об однако он она они оно от очень по под при с со так также такой там те тем
то того тоже той только том ты у уже хотя чего чей чем что чтобы чье чья эта эти это я
"""}.items()}
STOP_WORDS = frozenset().union(*STOP_WORDS_BY_LANGUAGE.values())
_EN_STOP_WORDS, _DE_STOP_WORDS = STOP_WORDS_BY_LANGUAGE["en"], STOP_WORDS_BY_LANGUAGE["de"]


@lru_cache(maxsize=200_000)
def _terms(word: str) -> tuple[str, ...]:
    if word.isdigit() or not (_CYRILLIC.search(word) or _LATIN.search(word)):
        return (word,)
    if _CYRILLIC.search(word):
        stems = {_STEMMERS["russian"].stemWord(word)}
    else:
        stems = {_STEMMERS["english"].stemWord(word), _STEMMERS["german"].stemWord(word)}
    return tuple(sorted(s for s in stems if s)) + tuple(stem(part, "de") for part in compound_parts(word))


def clear_cache() -> None:
    """Forget cached analyses (the active dictionaries changed)."""
    _terms.cache_clear()


def compound_parts(word: str) -> tuple[str, ...]:
    """The parts of `word` when it is a German compound (appliance.compounds), else ()."""
    found = dictionaries.active()
    if found is None or found.knows(stem(word, "en"), "en"):
        return ()
    return compounds.parts(word)


def stem(word: str, lang: str) -> str:
    """`word` (lower-cased, ё folded) stemmed as a word of `lang` ("en", "de" or "ru")."""
    return str(_STEMMER_OF[lang].stemWord(word))


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


_LANGUAGE_SAMPLE = 400
"""Characters of a passage read to guess its language: a few sentences are plenty."""


def language(text: str) -> str | None:
    """"en", "de" or "ru" when the start of `text` says so clearly, else None.

    Cyrillic words in the majority mean Russian; otherwise the language whose stop
    words occur more often, if it has at least one and the other fewer. Identifiers,
    keyword lists and other languages give None."""
    return _language(text[:_LANGUAGE_SAMPLE])


@lru_cache(maxsize=8192)
def _language(sample: str) -> str | None:
    lowered = sample.lower().replace("ё", "е")
    words = _WORD.findall(lowered)
    if not words:
        return None
    if _CYRILLIC.search(lowered) and sum(1 for w in words if _CYRILLIC.search(w)) * 2 > len(words):
        return "ru"
    en = sum(map(_EN_STOP_WORDS.__contains__, words))
    de = sum(map(_DE_STOP_WORDS.__contains__, words))
    if en == de:
        return None
    return "en" if en > de else "de"
