"""Choosing a document's title.

Order for files: converter metadata (HTML <title>, EPUB dc:title) -> the first H1 (its first line)
unless it is boilerplate -> the filename stem when it is informative -> the first H1
(even boilerplate) -> the stem. Data sources (path=None) get a title only from
metadata or their own H1: a source id identifies a document without describing it.

Boilerplate: a heading that names a section every document of an office set shares
("Introduction", "1. Общие положения", "Inhaltsverzeichnis", ...), with or without
numbering, or a heading with no words at all (a picture, a rule, digits).
"""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from appliance.ingest.markdown_blocks import first_h1

# Section names, compared case-insensitively after numbering and punctuation are stripped.
BOILERPLATE_HEADINGS: frozenset[str] = frozenset(
    {
        # English
        "introduction", "table of contents", "contents", "toc", "overview",
        "general provisions", "preface", "foreword", "abstract", "summary",
        "executive summary", "scope", "purpose", "background", "revision history",
        "change history", "change log", "changelog", "document history", "version history",
        "terms and definitions", "definitions", "glossary", "abbreviations", "references",
        "appendix", "annex", "untitled", "document control",
        # Russian
        "общие положения", "лист изменений", "лист регистрации изменений", "содержание",
        "оглавление", "введение", "предисловие", "аннотация", "область применения",
        "назначение", "термины и определения", "термины, определения и сокращения",
        "термины и сокращения", "сокращения", "обозначения и сокращения",
        "нормативные ссылки", "приложение", "история изменений", "общие сведения",
        "цель", "цели", "назначение документа", "список литературы",
        # German
        "inhaltsverzeichnis", "inhalt", "einleitung", "einführung", "vorwort",
        "allgemeines", "allgemeine bestimmungen", "zusammenfassung", "änderungshistorie",
        "änderungsverzeichnis", "versionshistorie", "begriffe", "begriffsbestimmungen",
        "abkürzungen", "abkürzungsverzeichnis", "anhang", "geltungsbereich", "zweck",
    }
)

# Words machines put into file names. A stem made only of these (and digits) says nothing.
GENERIC_STEM_WORDS: frozenset[str] = frozenset(
    {
        "untitled", "document", "documents", "doc", "new", "copy", "of", "scan", "scanned",
        "img", "image", "images", "dsc", "dscn", "dcim", "pxl", "photo", "pic", "picture",
        "screenshot", "screen", "shot", "file", "draft", "final", "version", "v", "page",
        "export", "print", "output", "temp", "tmp", "test", "unnamed", "noname", "default",
        "wa", "whatsapp", "signal", "telegram", "vid", "mvimg", "snapshot", "capture",
        "at", "am", "pm", "um", "bildschirmfoto",
        "копия", "документ", "документа", "новый", "новая", "новое", "скан", "сканирование",
        "изображение", "фото", "снимок", "экрана", "безымянный", "без", "имени", "файл",
        "черновик", "лист", "microsoft", "word", "excel",
        "kopie", "dokument", "neu", "neues", "bild", "foto", "unbenannt", "entwurf",
    }
)

_NUMBERING = re.compile(
    r"^\s*(?:(?:section|chapter|раздел|глава|kapitel|abschnitt)\s+)?"
    r"(?:[0-9]+(?:[.)][0-9]+)*[.)]?|[ivxlcdm]+[.)]|[a-zа-я][.)])\s+",
    re.IGNORECASE,
)
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def _plain(heading: str) -> str:
    """Heading text without markdown decoration: images drop their alt, links keep their text."""
    text = _IMAGE.sub("", heading)
    text = _LINK.sub(r"\1", text)
    text = re.sub(r"[*_`~]+", " ", text)
    text = re.sub(r"<[^>]+>", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def _has_words(text: str) -> bool:
    return any(not tok.isdigit() for tok in _TOKEN.findall(text))


def is_boilerplate_heading(heading: str) -> bool:
    """True for a shared section name or a heading holding no words."""
    text = _plain(heading)
    if not _has_words(text):
        return True
    core = text
    for _ in range(2):
        core = _NUMBERING.sub("", core)
    core = unicodedata.normalize("NFC", core).casefold()
    core = re.sub(r"[\s.:;,)\-–—]+$", "", core).strip()
    core = re.sub(r"\s+", " ", core)
    return core in BOILERPLATE_HEADINGS


def stem_title(path: Path) -> str:
    """The filename stem as a title: underscores become spaces, everything else is kept."""
    stem = Path(path).name
    suffix = Path(path).suffix
    if suffix and stem.endswith(suffix):
        stem = stem[: -len(suffix)]
    return re.sub(r"\s+", " ", stem.replace("_", " ")).strip()


def is_informative_stem(stem: str) -> bool:
    """At least 4 characters and, without pure-digit tokens, not only generic words."""
    if len(stem.strip()) < 4:
        return False
    tokens = [t.casefold() for t in _TOKEN.findall(stem) if not t.isdigit()]
    # A token such as "IMG20260807" or "DSC0042" is a generic prefix glued to a number.
    words = []
    for tok in tokens:
        m = re.fullmatch(r"([^\W\d_]+)\d+", tok)
        words.append(m.group(1) if m else tok)
    if not words:
        return False
    return not all(w in GENERIC_STEM_WORDS for w in words)


def choose_title(*, metadata_title: str | None, markdown: str, path: Path | None) -> str | None:
    """Pick the title for a document; see the module docstring for the order."""
    if metadata_title:
        meta = re.sub(r"\s+", " ", metadata_title).strip()
        if meta:
            return meta
    h1_raw = first_h1(markdown)
    if h1_raw:  # a line break inside the heading (PowerPoint's vertical tab, U+2028) ends the title
        h1_raw = h1_raw.splitlines()[0]
    h1 = _plain(h1_raw) if h1_raw is not None else None
    if h1 and not is_boilerplate_heading(h1_raw or ""):
        return h1
    if path is None:
        return h1 or None
    stem = stem_title(path)
    if stem and is_informative_stem(stem):
        return stem
    if h1:
        return h1
    return stem or None
