"""Cross-language keyword search end to end: real model index, the keyword side alone (weight 1.0)
and the default fusion, and search without the dictionaries."""
from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.errors import InvalidArgument
from appliance.languages import language
from appliance.search import dictionaries
from appliance.storage.tables import in_list

PASSAGES = {
    "pump.md": "# Cooling system\n\nTo replace the coolant pump, drain the coolant first, then unbolt the pump "
               "from the engine block.\n",
    "garden.md": "# Gardening\n\nRoses need sunlight and regular watering during the summer months.\n",
    "network.md": "# Network\n\nThe router assigns addresses to every device on the local network.\n",
    "bread.md": "# Baking\n\nKnead the dough for ten minutes and let it rise in a warm place.\n",
    "wartung.md": "# Wartung\n\nDie Kühlmittelpumpe muss alle 100000 Kilometer geprüft werden.\n",
    "teile.md": "# Teile\n\nDie Pumpe für das Kühlmittel sitzt hinter dem Zahnriemen.\n",
}


ENGLISH = ("pump.md", "garden.md", "network.md", "bread.md")


@pytest.fixture
def keyword_app(tmp_path: Path, make_app: Callable[..., Any]) -> Iterator[Any]:
    """Every passage indexed, searched by the keyword side alone."""
    yield _indexed(tmp_path, make_app, PASSAGES)


@pytest.fixture
def english_app(tmp_path: Path, make_app: Callable[..., Any]) -> Iterator[Any]:
    """The English passages only, searched by the keyword side alone."""
    yield _indexed(tmp_path, make_app, {name: PASSAGES[name] for name in ENGLISH})


def _indexed(tmp_path: Path, make_app: Callable[..., Any], passages: dict[str, str]) -> Any:
    app = make_app(_docs(tmp_path, passages), RAG_HYBRID_WEIGHT="1.0")
    app.sync()
    return app


def _first(app: Any, query: str, explain: bool = True) -> Any:
    return app.search(query, top_k=3, explain=explain).results[0]


def _kinds(hit: Any) -> set[str]:
    return {m["kind"] for m in hit.explain.matched}


@pytest.mark.parametrize("question", ["Wie tauscht man die Kühlmittelpumpe aus?", "Как заменить насос?"])
def test_a_german_or_russian_question_finds_the_english_passage_by_its_words(english_app: Any,
                                                                            question: str) -> None:
    hit = _first(english_app, question)
    assert hit.display_path == "pump.md"
    assert hit.explain.keyword_rank == 1
    translations = [m for m in hit.explain.matched if m["kind"] == "translation"]
    assert translations and all(m["pair"].endswith("-en") and m["dictionary"] for m in translations)
    assert "pump" in {m["term"] for m in translations}


def test_a_compound_meets_its_parts_and_back(keyword_app: Any) -> None:
    hits = keyword_app.search("Pumpe Kühlmittel", top_k=6, explain=True).results
    compound = next(h for h in hits if h.display_path == "wartung.md")
    assert compound.explain.keyword_rank is not None  # its parts were indexed beside it
    parts = keyword_app.search("Kühlmittelpumpe", top_k=6, explain=True).results
    teile = next(h for h in parts if h.display_path == "teile.md")
    assert teile.explain.keyword_rank is not None and "compound" in _kinds(teile)
    assert {m["compound"] for m in teile.explain.matched if m["kind"] == "compound"} == {"kühlmittelpumpe"}


def test_explain_gives_both_ranks_and_is_absent_unless_asked(keyword_app: Any) -> None:
    hit = _first(keyword_app, "coolant pump")
    assert hit.explain.vector_rank >= 1 and hit.explain.keyword_rank == 1
    assert {"term": "coolant", "kind": "query", "word": "coolant"} in hit.explain.matched
    assert _first(keyword_app, "coolant pump", explain=False).explain is None
    stop_word = keyword_app.search("die", top_k=3, explain=True).results
    assert stop_word and all(h.explain.keyword_rank is None and h.explain.matched == [] for h in stop_word)


def test_bad_queries_answer(keyword_app: Any) -> None:
    assert keyword_app.search("pompe de refroidissement", top_k=3).results  # French: no dictionary, no error
    assert _first(keyword_app, "pump насос Pumpe").display_path in {"pump.md", "teile.md"}
    long_query = " ".join(["Pumpe", "ab"] * 1000)  # 2,000 words within the 4,000-character limit
    assert keyword_app.search(long_query[:4000], top_k=3).results


def test_status_names_the_dictionaries(keyword_app: Any) -> None:
    described = keyword_app.status().dictionaries
    assert described["state"] == "loaded" and "de-en" in described["pairs"]


@pytest.fixture
def fused_app(tmp_path: Path, make_app: Callable[..., Any]) -> Iterator[Any]:
    """Every passage indexed, searched by the default fusion."""
    app = make_app(_docs(tmp_path, PASSAGES))
    app.sync()
    yield app


def test_the_default_ranking_lets_the_translations_judge_the_english_passage(fused_app: Any) -> None:
    hits = fused_app.search("Wie tauscht man die Kühlmittelpumpe aus?", top_k=6, explain=True).results
    pump = next(h for h in hits if h.display_path == "pump.md")
    assert pump.explain.keyword_rank is not None  # the translated list found it: BM25 no longer abstains
    assert "translation" in _kinds(pump)
    german = next(h for h in hits if h.display_path == "wartung.md")
    assert german.explain.keyword_rank is not None and "query" in _kinds(german)  # its own words


def test_bad_queries_answer_in_the_default_ranking(fused_app: Any) -> None:
    assert fused_app.search("pompe de refroidissement", top_k=3).results  # French: no dictionary, no error
    stop_word = fused_app.search("die", top_k=3, explain=True).results  # one stop word: the vector side alone
    assert stop_word and all(h.explain.keyword_rank is None for h in stop_word)
    mixed = fused_app.search("coolant насос Pumpe", top_k=3, explain=True).results  # three scripts and languages
    assert mixed and mixed[0].display_path in {"pump.md", "teile.md", "wartung.md"}
    short_words = " ".join(["x", "я", "7", "ü"] * 500)  # 2,000 words within the 4,000-character limit
    assert len(short_words.split()) == 2000 and fused_app.search(short_words, top_k=3).results
    words = " ".join(["Wie", "tauscht", "man", "die", "Kühlmittelpumpe", "aus"] * 334)  # 2,004 words
    with pytest.raises(InvalidArgument, match="characters; at most 4000"):
        fused_app.search(words, top_k=3)


def test_without_dictionaries_search_goes_on_and_status_says_why(tmp_path: Path, models_dir: Path,
                                                                real_embedder: Any) -> None:
    from tests.conftest import app_factory

    broken = tmp_path / "models"
    broken.mkdir()
    for entry in models_dir.iterdir():  # every model as it is, the dictionaries a copy missing one file
        if entry.name == dictionaries.DICTIONARY_ID.replace("/", "__"):
            shutil.copytree(entry, broken / entry.name)
            (broken / entry.name / "en-de.tsv").unlink()
        else:
            (broken / entry.name).symlink_to(entry)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "pump.md").write_text(PASSAGES["pump.md"], encoding="utf-8")
    try:
        app = app_factory(tmp_path, broken, real_embedder)(docs)
        app.sync()
        described = app.status().dictionaries
        assert described["state"] == "unavailable" and "without translation" in described["effect"]
        assert "en-de.tsv" in described["error"]["message"] and "make models" in described["error"]["hint"]
        hit = app.search("Wie tauscht man die Pumpe?", top_k=1, explain=True).results[0]
        assert hit.display_path == "pump.md" and "translation" not in _kinds(hit)
    finally:
        dictionaries.forget()


def test_the_ranked_lists_without_their_texts_rank_as_with_them(fused_app: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranked lists carry no text: fusion asks each candidate's language by id (IndexReader.passage_languages).
    The same hits, in the same order, with the same explanations as when every candidate row carried its text."""
    from appliance.assemble.passages import RANK_COLUMNS
    from appliance.search import fusion, hybrid

    (fused_app.settings.roots[0] / "nasos.md").write_text(
        "# Насос\n\nЧтобы заменить насос охлаждающей жидкости, сначала слейте жидкость.\n", encoding="utf-8")
    fused_app.sync()
    questions = ["How do I replace the coolant pump?", "Wie tauscht man die Kühlmittelpumpe aus?",
                 "Как заменить насос?", "coolant насос Pumpe", "Knead the dough", "ERR_ZORBLATT_7741"]
    narrow = {q: fused_app.search(q, top_k=7, explain=True).model_dump() for q in questions}
    texts_read: list[bool] = []

    def with_texts(*args: Any) -> list[fusion.Candidate]:
        texts_read.extend("text" in row for side in args[:2] for row in side.rows)
        return fusion.fuse(*args[:6])  # without `languages`: each row's language from its own text

    monkeypatch.setattr(hybrid, "RANK_COLUMNS", [*RANK_COLUMNS, "text"])
    monkeypatch.setattr(hybrid, "fuse", with_texts)
    assert {q: fused_app.search(q, top_k=7, explain=True).model_dump() for q in questions} == narrow
    assert texts_read and all(texts_read)
    assert any(h["explain"]["matched"] and any(m["kind"] == "translation" for m in h["explain"]["matched"])
               for reply in narrow.values() for h in reply["results"])  # the translated list judged some


def test_where_lancedb_ranks_the_lists_carry_their_texts_and_nothing_is_read_again_by_id(
        fused_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the replica's budget the ranked lists come from LanceDB with their texts and stored languages, and
    fusion takes each candidate's language and the search each passage's copies from them: no second read of the
    texts by id (IndexReader.rank_columns), and no language detected again; the one read by filter a search makes
    is of its hits' sections."""
    from appliance.assemble.passages import RANK_COLUMNS
    from appliance.languages import language
    from appliance.search import hybrid

    reader = fused_app.index.reader
    questions = ["Wie tauscht man die Kühlmittelpumpe aus?", "How do I replace the coolant pump?"]
    with_replica = {q: [h.source for h in fused_app.search(q, top_k=3).results] for q in questions}
    assert reader.rank_columns(RANK_COLUMNS) == RANK_COLUMNS
    monkeypatch.setattr(reader.tables, "memory_budget", 0)
    monkeypatch.setattr(reader, "_replica", None)

    detected: list[str] = []
    monkeypatch.setattr(hybrid, "language", lambda text: detected.append(text) or language(text))
    assert reader.rank_columns(RANK_COLUMNS) == [*RANK_COLUMNS, "text", "body_start", "lang"]
    reads: list[str] = []
    chunk_rows = reader.chunk_rows
    monkeypatch.setattr(reader, "chunk_rows", lambda where, *a, **k: reads.append(where) or chunk_rows(where, *a, **k))
    from_lancedb = {q: [h.source for h in fused_app.search(q, top_k=3).results] for q in questions}
    # copies are told apart by the carried passages: the one read by filter is of the hits' sections
    assert len(reads) == len(questions) and all(w.startswith("(parent_id IN") for w in reads), reads
    assert len(detected) == len(questions)  # the questions' languages; every passage's came stored
    assert {q: hits[0] for q, hits in from_lancedb.items()} == {q: hits[0] for q, hits in with_replica.items()}


@pytest.mark.parametrize("path", ["replica", "lancedb"])
def test_the_translated_list_searches_only_passages_in_another_language(
        tmp_path: Path, make_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """The translated list judges only passages in another language than the question's (search.fusion), so it
    is searched among those alone (their stored `lang`): over English passages it finds nothing for an English
    question, whatever its stems match there; once a German passage is indexed it finds that one, and the
    German passage comes back by its translation."""
    app = make_app(_docs(tmp_path, {name: PASSAGES[name] for name in ENGLISH}))
    app.sync()
    reader = app.index.reader
    if path == "lancedb":
        monkeypatch.setattr(reader.tables, "memory_budget", 0)
        monkeypatch.setattr(reader, "_replica", None)
    found: list[tuple[Any, list[str]]] = []
    keyword_side = reader.keyword_side

    def recorded(terms: Any, *args: Any) -> Any:
        side = keyword_side(terms, *args)
        ids = [r["id"] for r in side.rows]
        found.append((terms, [r["text"] for r in reader.chunk_rows(in_list("id", ids), ["text"])] if ids else []))
        return side

    monkeypatch.setattr(reader, "keyword_side", recorded)
    question = "How do I replace the coolant pump?"
    app.search(question, top_k=4)
    (own,), (translated,) = ([f for f in found if isinstance(f[0], str) == kind] for kind in (True, False))
    assert own[1] and translated[1] == []
    # the same translations, searched among every passage, match English ones (the list used to read them all)
    assert keyword_side(translated[0], 50, None, ["id"]).rows
    (app.settings.roots[0] / "wartung.md").write_text(PASSAGES["wartung.md"], encoding="utf-8")
    app.sync()
    found.clear()
    hits = app.search(question, top_k=6, explain=True).results
    translated_texts = next(texts for terms, texts in found if not isinstance(terms, str))
    assert translated_texts and all(language(t) == "de" for t in translated_texts)
    german = next(h for h in hits if h.display_path == "wartung.md")
    assert german.explain.keyword_rank is not None and "translation" in _kinds(german)


def _docs(tmp_path: Path, passages: dict[str, str]) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in passages.items():
        (docs / name).write_text(text, encoding="utf-8")
    return docs
