"""The baked dictionaries, query translation and the compound splitter, on the real baked lookups."""
from __future__ import annotations

import gzip
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.models.dictionaries import cyrillic_senses, dictd_entries, ding, render
from appliance.search import crosslingual, dictionaries
from appliance.search.dictionaries import DICTIONARY_ID, Table
from appliance.search.keywords import analyze, compound_parts


@pytest.fixture
def baked(models_dir: Path) -> Iterator[dictionaries.Dictionaries]:
    state = dictionaries.activate(models_dir)
    assert state.dictionaries is not None, state.describe()
    yield state.dictionaries
    dictionaries.forget()


@pytest.mark.model  # the baked dictionaries
def test_german_and_russian_words_get_english_translations(baked: dictionaries.Dictionaries) -> None:
    german = crosslingual.build("Wie tauscht man die Pumpe?", baked)
    pumpe = next(s for s in german.sets if s.word == "pumpe")
    assert {"en", "ru"} <= german.translated_into
    english = [m for m in pumpe.members if m.kind == "translation" and m.via and m.via.endswith("de-en")]
    assert english[0].term == "pump" and "Ding" in (english[0].via or "")
    russian = crosslingual.build("насос", baked)
    assert "pump" in {m.term for s in russian.sets for m in s.members if m.kind == "translation"}


@pytest.mark.model  # the baked dictionaries
def test_a_words_translations_into_one_language_weigh_as_one_term(baked: dictionaries.Dictionaries) -> None:
    query = crosslingual.build("Wasser Zelle Eigenschaften", baked)
    for term_set in query.sets:
        by_pair: dict[str, float] = {}
        for m in term_set.members:
            if m.kind == "translation":
                pair = (m.via or "")[-5:]
                by_pair[pair] = by_pair.get(pair, 0.0) + m.weight
        assert all(total <= 1.0 + 1e-9 for total in by_pair.values()), (term_set.word, by_pair)
        kept = [m for m in term_set.members if m.kind == "translation"]
        assert len(kept) <= crosslingual.MAX_TARGETS * 2


@pytest.mark.model  # the baked dictionaries
def test_the_list_for_other_languages_carries_untranslatable_words_as_themselves(
        baked: dictionaries.Dictionaries) -> None:
    russian = crosslingual.build("Что показывает команда dpkg-query о пакете?", baked)
    assert russian.language == "ru"
    across = russian.translations()
    assert {"dpkg", "query"} <= set(across)  # an identifier no dictionary knows reads the same in every language
    assert "команд" not in across and "пакет" not in across  # the question's own Russian words stay its own
    assert "command" in across  # and are there by their translations
    german = crosslingual.build("Wie tauscht man die Pumpe?", baked).translations()
    assert "pump" in german and not {"tauscht", "tausch"} & set(german)


@pytest.mark.model  # the baked dictionaries
def test_german_compounds_split_into_known_words(baked: dictionaries.Dictionaries) -> None:
    assert compound_parts("kühlmittelpumpe") == ("kühlmittel", "pumpe")
    assert compound_parts("konfigurationsdatei") == ("konfiguration", "datei")
    assert compound_parts("pumpe") == ()
    assert compound_parts("understanding") == ()  # an English word stays whole
    assert {"kuhlmittel", "pump"} <= set(analyze("Kühlmittelpumpe"))


@pytest.mark.model  # the baked dictionaries
def test_bad_queries_expand_safely(baked: dictionaries.Dictionaries) -> None:
    assert crosslingual.build("die", baked).sets == ()  # one stop word: no keyword side at all
    french = crosslingual.build("pompe de refroidissement", baked)  # no dictionary covers French
    own = {m.term for s in french.sets for m in s.members if m.kind == "query" and m.weight == 1.0}
    assert french.plain and set(french.plain.split()) <= own  # its own words keep their full weight
    mixed = crosslingual.build("pump насос Pumpe", baked)
    assert {s.language for s in mixed.sets} >= {"ru"}
    long_query = " ".join(f"wort{i} Pumpe Wasser" for i in range(700))
    expanded = crosslingual.build(long_query, baked)
    translated = [s for s in expanded.sets if any(m.kind == "translation" for m in s.members)]
    assert len(translated) <= crosslingual.MAX_TRANSLATED_WORDS


def test_without_dictionaries_the_query_is_the_plain_one() -> None:
    plain = crosslingual.build("Wie tauscht man die Kühlmittelpumpe?", None)
    assert not plain.expanded and plain.fts() == plain.plain


@pytest.mark.model  # the baked dictionaries
def test_damaged_dictionary_is_reported_by_name_and_search_goes_on(models_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(models_dir / DICTIONARY_ID.replace("/", "__"), tmp_path / DICTIONARY_ID.replace("/", "__"))
    shutil.copyfile(models_dir / "manifest.toml", tmp_path / "manifest.toml")
    table = tmp_path / DICTIONARY_ID.replace("/", "__") / "de-en.tsv"
    table.write_bytes(table.read_bytes()[:-1000])
    try:
        state = dictionaries.activate(tmp_path)
        assert state.dictionaries is None and state.error is not None
        described = state.describe()
        assert "de-en.tsv" in state.error.message and "minirag models bake" in (state.error.hint or "")
        assert described["state"] == "unavailable"
        assert dictionaries.active() is None
        assert crosslingual.build("Pumpe").fts() == "pump"
        table.unlink()
        dictionaries.forget()
        missing = dictionaries.activate(tmp_path)
        assert missing.error is not None and "de-en.tsv" in missing.error.message
    finally:
        dictionaries.forget()


def test_table_lookup_is_a_binary_search(tmp_path: Path) -> None:
    path = tmp_path / "t.tsv"
    path.write_text("".join(f"k{i:05d}\tv{i}\n" for i in range(1000)), encoding="utf-8")
    table = Table(path)
    assert table.get("k00000") == "v0" and table.get("k00999") == "v999" and table.get("k00500") == "v500"
    assert table.get("k1") is None and table.get("") is None


def test_converter_reads_ding_and_dictd_and_keeps_the_strongest_targets(tmp_path: Path) -> None:
    counts, words = ding("# comment\nPumpe {f} | Pumpen {pl} :: pump | pumps\n"
                         "Pumpe {f} [ugs.] :: ticker [coll.]\nPumpe {f} :: pump\n")
    assert render(counts).splitlines()[0].startswith("pump\tpump:")
    assert words["pumpe"] == 3
    body = "pump\n   [pʌmp]\n   1. _n. насос; помпа\n   2. _v. by water водным путём; качать\n"
    assert cyrillic_senses(body) == ["насос", "помпа", "качать"]
    data = gzip.compress(b"water\n 1) \xd0\xb2\xd0\xbe\xd0\xb4\xd0\xb0\n")
    entries = list(dictd_entries("water\tA\tT\n", gzip.decompress(data)))
    assert entries == [("water", "water\n 1) вода\n")]
