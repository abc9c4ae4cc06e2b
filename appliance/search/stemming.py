"""Snowball stems and stop words for English, German and Russian: the leaf the keyword analyser
and the dictionary converter share (so a dictionary's keys are the analyser's own stems)."""
from __future__ import annotations

import Stemmer

from appliance.languages import STOP_WORDS_BY_LANGUAGE

STEMMERS = {lang: Stemmer.Stemmer(lang) for lang in ("english", "german", "russian")}
_STEMMER_OF = {"en": STEMMERS["english"], "de": STEMMERS["german"], "ru": STEMMERS["russian"]}

STOP_WORDS = frozenset().union(*STOP_WORDS_BY_LANGUAGE.values())
"""Function words carry no topic: see languages.STOP_WORDS_BY_LANGUAGE."""


def stem(word: str, lang: str) -> str:
    """`word` (lower-cased, ё folded) stemmed as a word of `lang` ("en", "de" or "ru")."""
    return str(_STEMMER_OF[lang].stemWord(word))
