"""A query's keyword side across languages: each word with its translations as one weighted set.

BM25 alone cannot match a German question to an English passage: they share no
words. So each query word is looked up in the baked dictionaries (appliance.search.dictionaries)
and its translations into the other languages join it as one synonym set, in the
spirit of Pirkola's structured queries: a set stands for one concept, so the weights
of a word's translations into one language sum to at most one query term's, and a
word with ten dictionary senses counts no more than a word with one. Only the
strongest MAX_TARGETS translations of at least MIN_WEIGHT of the dictionary's
evidence are kept, so ambiguous words do not drown the query (both measured, see
README "Cross-language keyword search"). Russian and German meet directly and
through English. German compounds add their parts (appliance.search.compounds) as sets of
their own, translated like any word.

LanceDB's BM25 then scores the set members as boosted terms of one OR query (store._fts_query): each
member keeps its own document frequency (LanceDB exposes no postings to score a set
as one term), which the weights and the pruning keep in check. Keyword-alone the query's own
terms and the sets go into one such query (KeywordQuery.fts); in the fused ranking the translated
terms are a list of their own that judges the passages in other languages (KeywordQuery.translations,
search.fusion.fuse).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from appliance.languages import LANGUAGES, language
from appliance.search import dictionaries
from appliance.search.dictionaries import SOURCES, Dictionaries
from appliance.search.keywords import analyze, compound_parts, query_terms
from appliance.search.stemming import STOP_WORDS, stem

MAX_TARGETS = 3
"""Translations kept per word and target language."""
MIN_WEIGHT = 0.15
"""A translation with less of the dictionary's evidence for the word is dropped."""
PART_BOOST = 0.7
"""A compound part's weight beside the query's own words: the part is less specific than the compound."""
MAX_TRANSLATED_WORDS = 32
"""Only the first distinct words of a long query are translated (its later words still count as themselves)."""
_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LATIN_WORD = re.compile(r"^[a-zßäöüà-ÿ]+$")


@dataclass(frozen=True)
class Member:
    """One term of a set: the query's own stem, a translation, or a compound part."""

    term: str
    weight: float
    kind: str
    """"query", "translation" or "compound"."""
    via: str | None = None
    """For a translation the dictionary and the language pair; for a compound part the compound."""

    def describe(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {"term": self.term, "kind": self.kind}
        if self.kind == "translation":
            out["dictionary"], _, out["pair"] = (self.via or "").rpartition(" ")
        elif self.kind == "compound":
            out["compound"] = self.via
        return out


@dataclass(frozen=True)
class TermSet:
    word: str
    language: str | None
    members: tuple[Member, ...]


@dataclass(frozen=True)
class KeywordQuery:
    """The analysed keyword side of one query."""

    plain: str
    """The query's own terms as today's BM25 string (no translations, no parts)."""
    sets: tuple[TermSet, ...] = ()
    translated_into: frozenset[str] = field(default_factory=frozenset)
    language: str | None = None
    """The language the query is read in (languages.language, else the dictionaries' vote)."""

    @property
    def expanded(self) -> bool:
        return any(m.kind != "query" for s in self.sets for m in s.members)

    def boosts(self) -> dict[str, float]:
        """Each term's weight in the query: the largest any set gives it."""
        out: dict[str, float] = {}
        for term_set in self.sets:
            for member in term_set.members:
                out[member.term] = max(out.get(member.term, 0.0), member.weight)
        return out

    def translations(self) -> dict[str, float]:
        """The list that judges passages in other languages in the fused ranking (search.fusion.fuse):
        the translated terms, and the words not read in the query's language as themselves (an
        identifier, a name, an English command in a Russian question: what no dictionary translates
        is the same in every language). On our manuals carrying them lifted cross-lingual answer-passage
        hit@5 0.355 -> 0.387; carrying every word instead lost it again (scripts/passage_experiments.py)."""
        out: dict[str, float] = {}
        for term_set in self.sets:
            for member in term_set.members:
                if member.kind == "translation" or term_set.language != self.language:
                    out[member.term] = max(out.get(member.term, 0.0), member.weight)
        return out

    def fts(self) -> str | dict[str, float]:
        """What the index searches (Index.keyword_side): the plain string, or the boosted terms when expanded."""
        return self.boosts() if self.expanded else self.plain

    def members_of(self, term: str) -> list[Member]:
        """Every member `term` plays in the query (a term can be a word's own stem and another's translation)."""
        return [m for s in self.sets for m in s.members if m.term == term]


def build(query: str, dicts: Dictionaries | None = None, *, translate: bool = True) -> KeywordQuery:
    """The keyword query for `query`, translated with `dicts` (default: the active dictionaries) unless
    not `translate` (its own words and compound parts only)."""
    dicts = (dicts if dicts is not None else dictionaries.active()) if translate else None
    plain = query_terms(query)
    hint = language(query) or _vote(query, dicts)
    sets: list[TermSet] = []
    seen: set[str] = set()
    for match in _WORD.finditer(query.lower().replace("ё", "е")):
        word = match.group()
        if word in seen or word in STOP_WORDS:
            continue
        seen.add(word)
        own = analyze(word)
        if not own:
            continue
        translate = dicts is not None and len(seen) <= MAX_TRANSLATED_WORDS
        sets.extend(_word_sets(word, own, hint, dicts if translate else None))
    into = frozenset(lang for s in sets for m in s.members if m.kind == "translation"
                     for lang in [(m.via or "")[-2:]])
    return KeywordQuery(plain, tuple(sets), into, hint)


def _word_sets(word: str, own: list[str], hint: str | None, dicts: Dictionaries | None) -> list[TermSet]:
    """The word's own set (its stems and translations) and one set per compound part."""
    parts = compound_parts(word) if _LATIN_WORD.match(word) else ()
    part_stems = {stem(p, "de") for p in parts}
    whole = {stem(word, "en"), stem(word, "de")}
    own_terms = [t for t in dict.fromkeys(own) if t not in part_stems or t in whole]
    sources = _source_languages(word, hint, dicts)
    members = [Member(t, 1.0, "query") for t in own_terms]
    if dicts is not None:
        members += _translations(dicts, word, sources, 1.0)
    out = [TermSet(word, sources[0] if len(sources) == 1 else None, tuple(members))]
    for part in parts:
        part_members = [Member(stem(part, "de"), PART_BOOST, "compound", word)]
        if dicts is not None:
            part_members += _translations(dicts, part, ["de"], PART_BOOST)
        out.append(TermSet(part, "de", tuple(part_members)))
    return out


def _vote(query: str, dicts: Dictionaries | None) -> str | None:
    """English or German for a Latin-script query without stop words: the language more of its words
    belong to alone (by the dictionaries), else None."""
    if dicts is None:
        return None
    votes = {"en": 0, "de": 0}
    for word in set(_WORD.findall(query.lower())):
        if _LATIN_WORD.match(word):
            known = [lang for lang in votes if dicts.knows(stem(word, lang), lang)]
            if len(known) == 1:
                votes[known[0]] += 1
    if votes["en"] == votes["de"]:
        return None
    return "en" if votes["en"] > votes["de"] else "de"


def _source_languages(word: str, hint: str | None, dicts: Dictionaries | None) -> list[str]:
    """The languages `word` is read in: Russian for Cyrillic; for Latin script the one whose
    dictionary knows it, the query's language when both do, else both."""
    if _CYRILLIC.search(word):
        return ["ru"]
    if dicts is None or not _LATIN_WORD.match(word):
        return []
    known = [lang for lang in ("en", "de") if dicts.knows(stem(word, lang), lang)]
    if len(known) == 2 and hint in known:
        return [hint]
    return known


def _translations(dicts: Dictionaries, word: str, sources: list[str], scale: float) -> list[Member]:
    """The pruned, weighted translations of `word` from each of `sources` into the other languages."""
    members: list[Member] = []
    share = scale / max(1, len(sources))
    for source in sources:
        key = stem(word, source)
        for target in LANGUAGES:
            if target == source:
                continue
            found: dict[str, tuple[float, str]] = {}
            for term, weight in dicts.translations(key, source, target):
                found[term] = (weight, f"{SOURCES[f'{source}-{target}']} {source}-{target}")
            if {source, target} == {"de", "ru"}:
                for middle, first in dicts.translations(key, source, "en"):
                    for term, second in dicts.translations(middle, "en", target):
                        weight = first * second
                        if weight > found.get(term, (0.0, ""))[0]:
                            found[term] = (weight, f"{SOURCES[f'{source}-en']} + {SOURCES[f'en-{target}']} "
                                                   f"{source}-{target}")
            kept = sorted(((w, t, via) for t, (w, via) in found.items() if w >= MIN_WEIGHT),
                          key=lambda x: (-x[0], x[1]))[:MAX_TARGETS]
            total = sum(w for w, _, _ in kept)
            members += [Member(t, share * w / total, "translation", via) for w, t, via in kept if total > 0]
    return members
