"""Each chunk's card (tables.CARD): the writer stores it, an upgrade derives it, and every read through LanceDB
that takes its columns from it returns what the columns hold, also for rows without one and while another
process writes."""
from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from appliance.chunks import STORED_CHUNK_COLUMNS
from appliance.storage import reads
from appliance.storage.filters import Filter
from appliance.storage.index import Index
from appliance.storage.tables import (
    CARD,
    CARD_FIELDS,
    CHUNKS,
    OLD_CARD,
    OLD_CARD_FIELDS,
    SourceRow,
    card_of,
    chunk_schema,
)
from tests.fixtures.writers import looks_while_writing

DIM = 8
ROOT = Path(__file__).resolve().parents[2]
RANKED = ["id", "source_id", "parent_id", "text", "body_start"]


def _rows(source: str, count: int, seed: int = 0) -> list[dict]:
    """Chunks with every StoredChunk field set, some to values JSON keeps apart from their neighbours' (None,
    lists, non-ASCII, quotes)."""
    rng = np.random.default_rng(seed + len(source))
    out = []
    for i in range(count):
        v = rng.normal(size=DIM).astype("float32")
        out.append({f.name: None for f in chunk_schema(DIM)} | {
            "id": f"{source}:{i}", "source_id": source, "source_kind": "file", "root": "/docs",
            "path": source.removeprefix("/docs/"), "chunk_index": i, "body_start": i % 3,
            "text": f'Насос "{i}" pump\\{i}\n{"ä" * i}', "keywords": f"pump насос n{i}", "title": f"Title {source}",
            "parent_id": f"{source}:s{i // 2}", "heading": None if i % 2 else f"Heading {i}",
            "start_line": i * 10 or None, "end_line": i * 10 + 9, "page_start": i, "page_end": i, "slide": None,
            "sheet": "Sheet 1" if i == 1 else None, "doc_class": "note", "ocr_engine": "",
            "snapshot_date": "2026-01-02" if i else None, "also_unchanged_on": ["2025-12-01"] if i == 2 else None,
            "ingested_at": time.time(), "vector": (v / np.linalg.norm(v)).tolist()})
    return out


def _write(index: Index, source: str, count: int, seed: int = 0) -> None:
    index.writes.replace_sources([SourceRow(source_id=source, source_kind="file")], _rows(source, count, seed))


def _without_cards(index: Index) -> None:
    """Read as a table without cards is read: every column on its own."""
    index.tables.chunk_fields = index.tables.chunk_fields - {CARD}


def _reads(index: Index, vector: np.ndarray) -> dict[str, object]:
    """Every read through LanceDB whose columns a card can give, over one version."""
    with index.reader.query_view():
        return {
            "vector": index.reader.vector_side(vector, 20, None, RANKED).rows,
            "vector_scoped": index.reader.vector_side(vector, 20, Filter("/docs/b.md"), RANKED).rows,
            "keywords": index.reader.keyword_side("pump n3", 20, None, [*RANKED, "vector"]).rows,
            "keywords_scoped": index.reader.keyword_side("pump n3", 20, Filter("/docs/a.md"), RANKED).rows,
            "sections": index.reader.section_chunks(["/docs/a.md:s1", "/docs/b.md:s0"], ["/docs/c.md:4"]),
            "rows": index.reader.chunk_rows("chunk_index < 3", STORED_CHUNK_COLUMNS),
        }


def _same(a: object, b: object) -> bool:
    return json.dumps(a, default=lambda o: o.tolist() if hasattr(o, "tolist") else repr(o), sort_keys=True) == \
        json.dumps(b, default=lambda o: o.tolist() if hasattr(o, "tolist") else repr(o), sort_keys=True)


def test_the_writer_stores_each_rows_card_and_reads_through_it_equal_the_columns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = Index(tmp_path, DIM, memory_budget=0)  # LanceDB's path: the replica reads the columns themselves
    for source in ("/docs/a.md", "/docs/b.md", "/docs/c.md"):
        _write(index, source, 6)
    index.writes.refresh_indexes(fold_now=True)
    stored = index.chunks().search().select([*STORED_CHUNK_COLUMNS, "lang", CARD]).limit(None).to_list()
    assert len(stored) == 18 and all(r[CARD] == card_of(r) for r in stored)
    assert json.loads(stored[0][CARD]) == [stored[0][name] for name in CARD_FIELDS]
    assert CARD_FIELDS[0] == "id" and "lang" in CARD_FIELDS  # a ranked row is named and its language read with it
    assert OLD_CARD not in index.chunks().schema.names  # a new table has no earlier layout to keep
    selected = []
    carded = reads.carded
    monkeypatch.setattr(reads, "carded", lambda columns, cards: selected.append(out := carded(columns, cards)) or out)
    vector = np.asarray(_rows("/docs/b.md", 1)[0]["vector"])
    with_cards = _reads(index, vector)
    assert selected and all(CARD in s for s, held in selected if len(held) >= 2)
    assert sum(CARD in s for s, _ in selected) >= 6  # each read above took its columns from the card
    assert all("id" not in s and "lang" not in s for s, held in selected if CARD in s)  # with them, too
    _without_cards(index)
    selected.clear()
    without = _reads(index, vector)
    assert not any(CARD in s for s, _ in selected)
    for name, rows in with_cards.items():
        assert rows and _same(rows, without[name]), name


def test_an_upgraded_table_gets_its_cards_and_a_row_without_one_is_read_by_id(tmp_path: Path) -> None:
    """A table written before cards existed gets them on open, from its columns (tables._evolve), after the plain
    fields it also lacked; a row an older version writes afterwards has none, and a read gives its columns."""
    full = chunk_schema(DIM)
    old = pa.schema([f for f in full if f.name not in (CARD, "doc_class")])
    rows = [{k: v for k, v in row.items() if k in old.names} for row in _rows("/docs/a.md", 6)]
    lancedb.connect(str(tmp_path)).create_table(CHUNKS, data=pa.Table.from_pylist(rows, schema=old))
    index = Index(tmp_path, DIM, memory_budget=0)
    index.chunks()
    assert index.tables.cards_stored
    stored = index.chunks().search().select([*STORED_CHUNK_COLUMNS, "lang", CARD]).limit(None).to_list()
    assert len(stored) == 6 and all(r[CARD] == card_of(r) and r["doc_class"] == "note" for r in stored)
    older = _rows("/docs/older.md", 4)
    index.chunks().add(pa.Table.from_pylist([r | {CARD: None} for r in older], schema=full))
    sections = index.reader.section_chunks(["/docs/a.md:s1", "/docs/older.md:s1"], ["/docs/older.md:0"])
    assert [c.id for c in sections] == ["/docs/a.md:2", "/docs/a.md:3", "/docs/older.md:0", "/docs/older.md:2",
                                        "/docs/older.md:3"]
    by_id = {r["id"]: r for r in older}
    for chunk in sections[2:]:
        assert chunk.text == by_id[chunk.id]["text"] and chunk.sheet == by_id[chunk.id]["sheet"]


def test_a_table_with_the_earlier_cards_gets_the_new_ones_and_keeps_both_true(tmp_path: Path) -> None:
    """A table the previous version wrote (its card without the id and the language: OLD_CARD) gets this version's
    cards on open; every write fills both, so an earlier version reading beside reads a rewritten source's new
    text from its card, not the one the row held before (a merge keeps a column it is not given)."""
    full = chunk_schema(DIM)
    earlier = pa.schema([*(f for f in full if f.name != CARD), pa.field(OLD_CARD, pa.string())])
    rows = [r | {"lang": "", OLD_CARD: card_of(r, OLD_CARD_FIELDS)} for r in _rows("/docs/a.md", 6)]
    lancedb.connect(str(tmp_path)).create_table(CHUNKS, data=pa.Table.from_pylist(rows, schema=earlier))
    index = Index(tmp_path, DIM, memory_budget=0)
    index.chunks()
    assert index.tables.cards_stored
    rewritten = [r | {"text": f"rewritten {r['id']}"} for r in _rows("/docs/a.md", 6)]  # the same ids: a merge
    index.writes.replace_sources([SourceRow(source_id="/docs/a.md", source_kind="file")], rewritten)
    _write(index, "/docs/b.md", 3)
    stored = index.chunks().search().select([*STORED_CHUNK_COLUMNS, "lang", CARD, OLD_CARD]).limit(None).to_list()
    assert len(stored) == 9
    for row in stored:
        assert row[CARD] == card_of(row) and row[OLD_CARD] == card_of(row, OLD_CARD_FIELDS), row["id"]
    written = {r["id"]: f"rewritten {r['id']}" for r in rewritten}
    assert {r["id"]: json.loads(r[OLD_CARD])[OLD_CARD_FIELDS.index("text")] for r in stored
            if r["source_id"] == "/docs/a.md"} == written
    assert [c.text for c in index.reader.section_chunks(["/docs/a.md:s0"])] == [written["/docs/a.md:0"],
                                                                               written["/docs/a.md:1"]]


def test_a_clean_rebuild_elsewhere_drops_the_earlier_cards_and_a_writer_that_saw_them_still_writes(
        tmp_path: Path) -> None:
    """Another process rebuilds the upgraded table clean (drop_all: this version's columns alone); a writer that
    opened it with the earlier cards writes what the table holds now."""
    earlier = pa.schema([*(f for f in chunk_schema(DIM) if f.name != CARD), pa.field(OLD_CARD, pa.string())])
    rows = [r | {"lang": "", OLD_CARD: card_of(r, OLD_CARD_FIELDS)} for r in _rows("/docs/a.md", 3)]
    lancedb.connect(str(tmp_path)).create_table(CHUNKS, data=pa.Table.from_pylist(rows, schema=earlier))
    writer = Index(tmp_path, DIM, memory_budget=0)
    assert OLD_CARD in writer.tables.chunk_fields | frozenset(writer.chunks().schema.names)
    Index(tmp_path, DIM, memory_budget=0).writes.drop_all()
    writer.tables.checkout_latest()
    _write(writer, "/docs/b.md", 3)
    stored = writer.chunks().search().select([*STORED_CHUNK_COLUMNS, "lang", CARD]).limit(None).to_list()
    assert OLD_CARD not in writer.chunks().schema.names
    assert sorted(r["id"] for r in stored) == ["/docs/b.md:0", "/docs/b.md:1", "/docs/b.md:2"]
    assert all(r[CARD] == card_of(r) for r in stored)


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from tests.unit.test_cards import DIM, _write
    from appliance.storage.index import Index
    index = Index(Path(sys.argv[2]), DIM, memory_budget=0)
    for n in range(int(sys.argv[3])):
        _write(index, "/docs/a.md", 6, seed=n + 1)
        _write(index, f"/docs/n{n}.md", 3, seed=n)
        time.sleep(0.05)
""")


def test_reads_through_cards_while_another_process_writes_give_the_columns_of_the_version_read(
        tmp_path: Path) -> None:
    """Another process rewrites a source and adds others; every query view of this one reads the same rows
    through the cards as through the columns, of the version it holds."""
    index = Index(tmp_path, DIM, memory_budget=0)
    _write(index, "/docs/a.md", 6)
    writes = 10

    def look() -> int:
        with index.reader.query_view():
            fields = index.tables.chunk_fields
            carded = index.reader.chunk_rows("chunk_index >= 0", STORED_CHUNK_COLUMNS)
            index.tables.chunk_fields = fields - {CARD}
            plain = index.reader.chunk_rows("chunk_index >= 0", STORED_CHUNK_COLUMNS)
            index.tables.chunk_fields = fields
        assert _same(carded, plain)
        return len(carded)

    seen = looks_while_writing(WRITER, [str(ROOT), str(tmp_path), str(writes)], look, 6 + 3 * writes)
    assert {6, 6 + 3 * writes} <= seen
