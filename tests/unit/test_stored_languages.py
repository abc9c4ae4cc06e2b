"""Each chunk's stored language (`lang`) and the translated keyword list searched among the passages in another
language: the writer stores it, an upgrade derives it from the texts, and a query reads the version it holds,
also while another process writes."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from appliance.config import replica_budget
from appliance.languages import language
from appliance.storage.index import Index
from appliance.storage.tables import CHUNKS, SourceRow, chunk_schema, stored_language
from tests.fixtures.writers import looks_while_writing

DIM = 8
ENGLISH = "The pump sits behind the belt and it must be checked every year."
GERMAN = "Die Pumpe sitzt hinter dem Zahnriemen und muss jedes Jahr geprüft werden."
RUSSIAN = "Насос стоит за ремнём, и его надо проверять каждый год."
TERMS = {"pump": 1.0, "pumpe": 0.5, "насос": 0.5}
"""Weighted terms, as a translated list's (the keyword column is the text's words here: `_rows`)."""
ROOT = Path(__file__).resolve().parents[2]


def _rows(source: str, texts: list[str]) -> list[dict]:
    rng = np.random.default_rng(len(source))
    out = []
    for i, text in enumerate(texts):
        v = rng.normal(size=DIM).astype("float32")
        out.append({f.name: None for f in chunk_schema(DIM)} | {
            "id": f"{source}:{i}", "source_id": source, "parent_id": f"{source}#0", "chunk_index": i,
            "text": text, "keywords": " ".join(w.lower() for w in text.replace(",", " ").split()),
            "ingested_at": time.time(), "vector": (v / np.linalg.norm(v)).tolist()})
    return out


def _write(index: Index, source: str, texts: list[str]) -> None:
    index.writes.replace_sources([SourceRow(source_id=source, source_kind="file")], _rows(source, texts))


def _translated(index: Index, question_language: str) -> list[str]:
    """The texts the translated list finds for a question in `question_language`, over the version read."""
    with index.reader.query_view():
        side = index.reader.keyword_side(TERMS, 50, None, ["id"], question_language)
        ids = [r["id"] for r in side.rows]
        return sorted(r["text"] for r in index.reader.chunk_rows(f"id IN ({', '.join(repr(i) for i in ids)})",
                                                                 ["text"])) if ids else []


@pytest.mark.parametrize("budget", [None, 0], ids=["replica", "lancedb"])
def test_the_translated_list_finds_only_the_passages_in_other_languages(tmp_path: Path, budget: int | None) -> None:
    index = Index(tmp_path, DIM, memory_budget=replica_budget() if budget is None else budget)
    _write(index, "/docs/a.md", [ENGLISH, "ERR_ZORBLATT_7741 0x7f pump"])  # an identifier reads as no language
    stored = index.reader.chunk_rows("source_id = '/docs/a.md'", ["text", "lang"])
    assert [r["lang"] for r in stored] == [stored_language(r["text"]) for r in stored] == ["en", ""]
    assert _translated(index, "en") == []  # both match "pump", neither is in another language
    assert _translated(index, "de") == [ENGLISH]
    _write(index, "/docs/b.md", [GERMAN, RUSSIAN])
    assert _translated(index, "en") == sorted([GERMAN, RUSSIAN])
    assert _translated(index, "ru") == sorted([ENGLISH, GERMAN])
    index.writes.refresh_indexes(fold_now=True)  # the column's B-tree answers the same
    assert any(tuple(i.columns) == ("lang",) for i in index.chunks().list_indices())
    assert _translated(index, "en") == sorted([GERMAN, RUSSIAN])
    _write(index, "/docs/b.md", [ENGLISH])  # the German and Russian passages replaced
    assert _translated(index, "en") == []
    with index.reader.query_view():  # searched among every passage, the same terms find all three
        assert len(index.reader.keyword_side(TERMS, 50, None, ["id"]).rows) == 3


def test_an_upgraded_table_gets_its_languages_and_a_row_without_one_is_still_searched(tmp_path: Path) -> None:
    """A table written before `lang` existed gets it on open, from its texts (tables._evolve). A row an older
    version writes afterwards has none: the translated list still searches it, as it searched every row."""
    full = chunk_schema(DIM)
    old = pa.schema([f for f in full if f.name != "lang"])
    texts = [GERMAN, ENGLISH, RUSSIAN, "ERR_7741 42"]
    rows = [{k: v for k, v in row.items() if k != "lang"} for row in _rows("/docs/old.md", texts)]
    lancedb.connect(str(tmp_path)).create_table(CHUNKS, data=pa.Table.from_pylist(rows, schema=old))
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    stored = index.reader.chunk_rows("source_id = '/docs/old.md'", ["chunk_index", "lang"])
    assert [r["lang"] for r in sorted(stored, key=lambda r: r["chunk_index"])] == ["de", "en", "ru", ""]
    assert Index(tmp_path, DIM, memory_budget=replica_budget()).chunks().count_rows() == 4  # a second open: as is
    assert _translated(index, "en") == sorted([GERMAN, RUSSIAN])
    older = _rows("/docs/older.md", [ENGLISH])[0] | {"lang": None}
    index.chunks().add(pa.Table.from_pylist([older], schema=full))
    assert _translated(index, "en") == sorted([ENGLISH, GERMAN, RUSSIAN])
    _write(index, "/docs/older.md", [ENGLISH])  # written again by this version: English, and left out
    assert _translated(index, "en") == sorted([GERMAN, RUSSIAN])


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from tests.unit.test_stored_languages import DIM, GERMAN, _write
    from appliance.storage.index import Index
    index = Index(Path(sys.argv[2]), DIM, memory_budget=0)
    for n in range(int(sys.argv[3])):
        _write(index, f"/docs/de{n}.md", [GERMAN])
        time.sleep(0.05)
""")


@pytest.mark.parametrize("budget", [None, 0], ids=["replica", "lancedb"])
def test_each_version_read_while_another_process_writes_gets_its_own_passages(tmp_path: Path,
                                                                               budget: int | None) -> None:
    """Another process commits German passages one by one; every query view of this one finds, for an English
    question, exactly the German passages of the version it reads, and never the English one."""
    index = Index(tmp_path, DIM, memory_budget=replica_budget() if budget is None else budget)
    _write(index, "/docs/a.md", [ENGLISH])
    writes = 12

    def look() -> int:
        with index.reader.query_view():
            german = [r["text"] for r in index.reader.chunk_rows("source_id != '/docs/a.md'", ["text"])]
            side = index.reader.keyword_side(TERMS, 50, None, ["id"], "en")
            assert all(language(t) == "de" for t in german)
            assert len(side.rows) == len(german) and all(r["id"].startswith("/docs/de") for r in side.rows)
        return len(german)

    assert looks_while_writing(WRITER, [str(ROOT), str(tmp_path), str(writes)], look, writes) >= {0, writes}


OPENER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from tests.unit.test_stored_languages import DIM
    from appliance.storage.index import Index
    start = float(sys.argv[3])
    time.sleep(max(0.0, start - time.time()))
    index = Index(Path(sys.argv[2]), DIM, memory_budget=0)
    rows = index.reader.chunk_rows("lang = 'de'", ["id"])
    print(len(rows))
""")


def test_processes_opening_an_old_table_at_once_all_open_it(tmp_path: Path) -> None:
    """The scheduler and the server start together after an upgrade: each finds the table without `lang`, and
    each derives it; the ones that lose the race open the table the winner wrote, and none fails."""
    full = chunk_schema(DIM)
    old = pa.schema([f for f in full if f.name != "lang"])
    texts = [GERMAN, ENGLISH, RUSSIAN] * 4000
    rows = [{k: v for k, v in row.items() if k != "lang"} for row in _rows("/docs/old.md", texts)]
    lancedb.connect(str(tmp_path)).create_table(CHUNKS, data=pa.Table.from_pylist(rows, schema=old))
    start = time.time() + 3
    openers = [subprocess.Popen([sys.executable, "-c", OPENER, str(ROOT), str(tmp_path), str(start)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=120) for p in openers]
    assert [p.returncode for p in openers] == [0, 0, 0], [err[-2000:] for _, err in results]
    assert [out.strip() for out, _ in results] == ["4000"] * 3
    index = Index(tmp_path, DIM, memory_budget=0)
    assert [f.name for f in index.chunks().schema].count("lang") == 1


def test_a_read_only_index_from_before_languages_opens_as_it_is_and_its_list_searches_every_passage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Where the column cannot be added (a read-only mount of an index an earlier version wrote), the table
    opens as it is, says why, and the translated list searches every passage, as that version did."""
    import errno

    from appliance.storage import tables

    full = chunk_schema(DIM)
    old = pa.schema([f for f in full if f.name != "lang"])
    rows = [{k: v for k, v in row.items() if k != "lang"} for row in _rows("/docs/old.md", [GERMAN, ENGLISH])]
    lancedb.connect(str(tmp_path)).create_table(CHUNKS, data=pa.Table.from_pylist(rows, schema=old))

    def unwritable(*_: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tables, "_add_fields", unwritable)
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    assert index.chunks().count_rows() == 2 and "lang" not in index.chunks().schema.names
    assert not index.tables.languages_stored and "cannot be written" in caplog.text
    assert _translated(index, "en") == sorted([ENGLISH, GERMAN])
    monkeypatch.undo()  # writable again: the next write gives the table its languages first
    _write(index, "/docs/new.md", [RUSSIAN])
    assert index.tables.languages_stored and _translated(index, "en") == sorted([GERMAN, RUSSIAN])


def _scored(index: Index, terms: dict[str, float], question_language: str) -> list[tuple[str, float]]:
    with index.reader.query_view():
        return [(r["id"], r["_score"]) for r in index.reader.keyword_side(terms, 50, None, ["id"],
                                                                          question_language).rows]


@pytest.mark.parametrize("budget", [None, 0], ids=["replica", "lancedb"])
def test_the_translated_list_drops_the_terms_no_passage_in_another_language_holds_and_ranks_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int | None) -> None:
    """A term that no passage outside the question's language holds adds nothing to their scores: the list
    searched without it finds the same passages with the same scores, and a list of only such terms is not
    searched at all (reads.foreign_vocabulary). Past FOREIGN_VOCABULARY_ROWS such passages it is searched whole."""
    from appliance.storage import reads

    index = Index(tmp_path, DIM, memory_budget=replica_budget() if budget is None else budget)
    _write(index, "/docs/en.md", [ENGLISH, "The pump and the belt were replaced.", "Pump pump pump."])
    _write(index, "/docs/de.md", [GERMAN, "Die Pumpe ist neu."])
    searched: list[object] = []
    real = reads._bm25

    def counted(chunks, terms, *args, **kwargs):  # type: ignore[no-untyped-def]
        searched.append(terms)
        return real(chunks, terms, *args, **kwargs)

    monkeypatch.setattr(reads, "_bm25", counted)
    terms = {"pump": 1.0, "pumpe": 0.6, "jahr": 0.3, "zahnriemen": 0.8, "belt": 0.9}
    pruned = _scored(index, terms, "en")
    assert searched == [{"pumpe": 0.6, "jahr": 0.3, "zahnriemen": 0.8}]  # only the German passages' terms
    assert [i for i, _ in pruned] == ["/docs/de.md:0", "/docs/de.md:1"]
    searched.clear()
    assert _scored(index, {"pump": 1.0, "belt": 0.9}, "en") == [] and searched == []  # nothing to find there
    monkeypatch.setattr(reads, "FOREIGN_VOCABULARY_ROWS", 1)  # too many to keep: searched whole
    index.reader._vocabularies = {}
    whole = _scored(index, terms, "en")
    assert searched == [terms]
    assert [i for i, _ in whole] == [i for i, _ in pruned]
    assert [s for _, s in whole] == pytest.approx([s for _, s in pruned])


def test_weighted_terms_of_one_weight_score_as_the_boolean_query_of_them(tmp_path: Path) -> None:
    """Terms that share one weight are searched as one match query with that boost (reads._fts_query): the
    same passages with the same scores as LanceDB's BooleanQuery of one clause a term, which is far slower."""
    from lancedb.query import BooleanQuery, FullTextOperator, MatchQuery, Occur

    from appliance.storage.reads import _fts_query, other_languages
    from appliance.storage.tables import FTS_COLUMN

    index = Index(tmp_path, DIM, memory_budget=0)
    _write(index, "/docs/a.md", [ENGLISH, GERMAN, RUSSIAN, "Pump pump belt.", "The belt broke twice this year."])
    index.writes.refresh_indexes(fold_now=True)
    chunks = index.chunks()
    for terms in ({"pump": 0.4, "belt": 0.4, "year": 0.4}, {"pumpe": 1.0}, {"pump": 0.5, "belt": 0.25}):
        boolean = BooleanQuery([(Occur.SHOULD, MatchQuery(term, FTS_COLUMN, boost=boost, fuzziness=0,
                                                          operator=FullTextOperator.OR))
                                for term, boost in terms.items()])
        expected = (chunks.search(boolean, query_type="fts", fts_columns=FTS_COLUMN)
                    .where(other_languages("ru"), prefilter=True).select(["id", "_score"]).to_list())
        assert isinstance(_fts_query(terms), MatchQuery if len(set(terms.values())) == 1 else BooleanQuery)
        got = _scored(index, terms, "ru")  # among the passages in English and German
        assert dict(got) == pytest.approx({r["id"]: r["_score"] for r in expected}) and got
