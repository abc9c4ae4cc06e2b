"""Which of English, German and Russian a text is in, by its stop words and script: the one detector the
keyword analyser, fusion's language check and the index's stored `lang` column share, so a language stored
with a chunk and one read from its text at query time agree."""
from __future__ import annotations

import re
from functools import lru_cache

LANGUAGES = ("en", "de", "ru")
"""What `language` tells apart; the keyword analysis and its dictionaries know the same three."""
_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")

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
_EN_STOP_WORDS, _DE_STOP_WORDS = STOP_WORDS_BY_LANGUAGE["en"], STOP_WORDS_BY_LANGUAGE["de"]

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
