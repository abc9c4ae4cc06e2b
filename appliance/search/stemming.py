"""Snowball stems and stop words for English, German and Russian: the leaf the keyword analyser
and the dictionary converter share (so a dictionary's keys are the analyser's own stems)."""
from __future__ import annotations

import Stemmer

STEMMERS = {lang: Stemmer.Stemmer(lang) for lang in ("english", "german", "russian")}
_STEMMER_OF = {"en": STEMMERS["english"], "de": STEMMERS["german"], "ru": STEMMERS["russian"]}

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

def stem(word: str, lang: str) -> str:
    """`word` (lower-cased, ё folded) stemmed as a word of `lang` ("en", "de" or "ru")."""
    return str(_STEMMER_OF[lang].stemWord(word))
