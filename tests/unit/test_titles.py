"""Title choice: metadata -> non-boilerplate H1 -> informative stem -> any H1 -> stem."""
from __future__ import annotations

from pathlib import Path

import pytest

from appliance.ingest.titles import (
    choose_title,
    first_h1,
    is_boilerplate_heading,
    is_informative_stem,
    stem_title,
)


def title(markdown: str, name: str | None, meta: str | None = None) -> str | None:
    return choose_title(metadata_title=meta, markdown=markdown, path=Path(name) if name else None)


# -- rule 1: converter metadata wins
def test_metadata_title_wins_over_everything() -> None:
    assert title("# Heading\n", "Report_2024.html", meta="  The <title>\n text ") == "The <title> text"


def test_blank_metadata_title_is_ignored() -> None:
    assert title("# Heading\n", "x.html", meta="   ") == "Heading"


# -- rule 2: the first H1 unless boilerplate
def test_author_heading_wins_over_informative_stem() -> None:
    assert title("intro\n# Квартальный отчёт\n# Second", "И-112_ЗПС_Хранение ТМЗ.docx") == "Квартальный отчёт"


@pytest.mark.parametrize(
    "heading",
    [
        "Introduction", "Table of contents", "Contents", "1. Общие положения", "Общие положения",
        "Лист изменений", "Содержание", "Введение", "Inhaltsverzeichnis", "Einleitung",
        "1 Introduction", "2.1. Einleitung:", "I. Introduction", "Раздел 1. Общие положения",
        "ВВЕДЕНИЕ", "**Содержание**", "![](x.png)", "![logo](images/logo.png)", "1.2.3", "---", "",
    ],
)
def test_boilerplate_headings(heading: str) -> None:
    assert is_boilerplate_heading(heading)


@pytest.mark.parametrize(
    "heading",
    [
        "Introduction to Kubernetes", "Общие положения о закупках", "Hauptstadt Berlin",
        "1. Хранение ТМЗ", "![](x.png) Quarterly report", "Release 2.0",
    ],
)
def test_real_headings_are_not_boilerplate(heading: str) -> None:
    assert not is_boilerplate_heading(heading)


def test_boilerplate_h1_gives_way_to_informative_stem() -> None:
    md = "# 1. Общие положения\n\nТекст.\n"
    assert title(md, "И-112_ЗПС_Хранение ТМЗ.docx") == "И-112 ЗПС Хранение ТМЗ"


def test_picture_only_h1_gives_way_to_stem() -> None:
    assert title("# ![](media/image1.png)\n\nbody", "Regulation_on_travel.docx") == "Regulation on travel"


# -- rule 3: informative stem
@pytest.mark.parametrize(
    "stem",
    ["Untitled-1", "IMG_20260807_123456", "Копия документа (2)", "abc", "DSC0042", "Scan 2024-01-05",
     "New Document", "Screenshot 2025-03-01 at 10.22.11", "document", "12345678", "img"],
)
def test_uninformative_stems(stem: str) -> None:
    assert not is_informative_stem(stem)


@pytest.mark.parametrize(
    "stem",
    ["И-112 ЗПС Хранение ТМЗ", "Scan of lease agreement", "Copy of Budget 2024", "Mietvertrag Berlin",
     "Новый регламент закупок", "IMG processing guide", "RFC 9110"],
)
def test_informative_stems(stem: str) -> None:
    assert is_informative_stem(stem)


def test_stem_keeps_everything_but_underscores() -> None:
    assert stem_title(Path("И-112_ЗПС_Хранение ТМЗ.docx")) == "И-112 ЗПС Хранение ТМЗ"
    assert stem_title(Path("a__b (v2).final.pdf")) == "a b (v2).final"


# -- rules 4 and 5: fall back to any H1, then the stem
def test_boilerplate_h1_used_when_stem_uninformative() -> None:
    assert title("# Введение\n", "IMG_20260807_123456.jpg") == "Введение"


def test_stem_as_last_resort() -> None:
    assert title("no heading at all", "Untitled-1.docx") == "Untitled-1"
    assert title("# ![](x.png)", "Копия документа (2).docx") == "Копия документа (2)"


# -- data sources: only their own title
def test_data_source_without_heading_has_no_title() -> None:
    assert title("plain words", None) is None


def test_data_source_uses_its_own_h1_even_boilerplate() -> None:
    assert title("# Introduction\ntext", None) == "Introduction"
    assert title("text\n# Real\n", None) == "Real"


# -- H1 detection
def test_first_h1_ignores_code_fences_and_h2() -> None:
    md = "## Sub\n```\n# not a heading\n```\n#NoSpace\n# Title ##\n"
    assert first_h1(md) == "Title"


def test_heading_links_keep_their_text() -> None:
    assert title("# [Handbook](http://x) for *admins*", "doc.md") == "Handbook for admins"
