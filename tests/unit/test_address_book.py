"""The address book (storage.addresses) and the scoped vector search that masks LanceDB's unfiltered candidates
with it (reads._postfiltered), over real LanceDB tables with a real IVF-RaBitQ index: the book says of every row
what the table holds, a masked search returns only rows inside its scope with their exact distances and finds
the scope's nearest as well as LanceDB's prefilter does, a book that does not match the table is never trusted,
and a reader keeps answering scoped searches correctly while another process writes."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from appliance.storage import reads as store_reads, writes as store_writes
from appliance.storage.addresses import AddressBook
from appliance.storage.filters import Filter
from appliance.storage.index import Index
from appliance.storage.tables import SourceRow, chunk_schema

DIM = 32
FOLDERS = 4
CLASSES = ("note", "manual", None)
COLUMNS = ["id", "source_id", "parent_id"]
ROOT = Path(__file__).resolve().parents[2]
SCOPES = [Filter("/docs/f1"), Filter("/docs/f2", "manual"), Filter(doc_class="note"), Filter("/docs")]


def _source(n: int) -> tuple[str, str | None]:
    return f"/docs/f{n % FOLDERS}/{n:05d}.md", CLASSES[n % len(CLASSES)]


def _rows(first: int, count: int, chunks: int = 3) -> tuple[list[SourceRow], list[dict[str, Any]]]:
    rng = np.random.default_rng(first)
    sources, rows = [], []
    for n in range(first, first + count):
        source_id, doc_class = _source(n)
        sources.append(SourceRow(source_id=source_id, source_kind="file", doc_class=doc_class or "",
                                 chunk_count=chunks, ingested_at=1.0))
        rows += [{f.name: None for f in chunk_schema(DIM)} | {
            "id": f"k{n}:{i}", "source_id": source_id, "doc_class": doc_class, "chunk_index": i,
            "text": f"passage {i} of file {n}", "keywords": f"passag file n{n}", "parent_id": f"k{n}:s0",
            "embed_key": f"e{n}:{i}", "ingested_at": 1.0,
            "vector": rng.standard_normal(DIM).astype("float32").tolist()} for i in range(chunks)]
    return sources, rows


def _write(index: Index, first: int, count: int) -> None:
    index.writes.replace_sources(*_rows(first, count))


@pytest.fixture
def small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vector index past 10 rows, in partitions of ~25 rows, searched as a large one is."""
    from lancedb.index import IvfRq

    monkeypatch.setattr(store_writes, "VECTOR_INDEX_MIN_ROWS", 10)
    monkeypatch.setattr(store_writes, "VECTOR_INDEX", IvfRq(distance_type="cosine", target_partition_size=25,
                                                           num_bits=store_writes.VECTOR_CODE_BITS))
    monkeypatch.setattr(store_reads, "VECTOR_PARTITION_ROWS", 25)
    monkeypatch.setattr(store_reads, "MIN_PROBES", 1)


def _stored(index: Index) -> pa.Table:
    chunks = index.chunks()
    assert chunks is not None
    return chunks.search().select(["source_id", "doc_class", "id", "vector"]).with_row_id(True).limit(None).to_arrow()


def _book(index: Index, old: AddressBook | None = None) -> AddressBook:
    chunks = index.chunks()
    assert chunks is not None
    return AddressBook.read(chunks.to_lance(), old)


def _assert_book_matches(book: AddressBook, stored: pa.Table) -> None:
    rows = stored.select(["source_id", "doc_class"]).to_pylist()
    addresses = stored.column("_rowid").to_numpy()
    for where in [*SCOPES, Filter("/docs/f1/00001.md"), Filter("/elsewhere")]:
        truth = np.array([where.keeps(row) for row in rows])
        kept = book.keeps(addresses, where)
        assert kept is not None and kept.tolist() == truth.tolist()
        assert book.share(where) == pytest.approx(truth.mean())


def test_the_book_says_of_every_row_what_the_table_holds_and_reads_only_what_changed(tmp_path: Path) -> None:
    index = Index(tmp_path, DIM, memory_budget=0)
    for first in range(0, 120, 40):  # three writes: three fragments
        _write(index, first, 40)
    book = _book(index)
    _assert_book_matches(book, _stored(index))
    _write(index, 120, 20)  # a fragment more
    index.writes.delete_sources([_source(5)[0], _source(50)[0]])  # deletions in two fragments
    grown = _book(index, book)
    _assert_book_matches(grown, _stored(index))
    unchanged = [fid for fid, fragment in book.fragments.items() if grown.fragments[fid] is fragment]
    assert len(unchanged) == len(book.fragments) - 2  # the fragments without new deletions were not read again
    stale = _stored(index).column("_rowid").to_numpy()
    chunks = index.chunks()
    assert chunks is not None
    store_writes.fold(chunks)  # compaction: the small fragments' rows move into a new one
    compacted = _book(index, grown)
    _assert_book_matches(compacted, _stored(index))
    assert set(compacted.fragments).isdisjoint(grown.fragments)
    assert compacted.keeps(stale, Filter("/docs")) is None  # rows moved: their old addresses are not vouched for


def _exact_inside(stored: pa.Table, vector: np.ndarray, where: Filter) -> list[str]:
    rows = stored.select(["source_id", "doc_class"]).to_pylist()
    inside = [i for i, row in enumerate(rows) if where.keeps(row)]
    matrix = np.stack(stored.column("vector").to_numpy(zero_copy_only=False)[inside]).astype(np.float32)
    similarity = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)) @ (vector / np.linalg.norm(vector))
    ids = stored.column("id").to_pylist()
    return [ids[inside[i]] for i in np.argsort(-similarity, kind="stable")]


def _ready(index: Index) -> AddressBook:
    chunks = index.chunks()
    assert chunks is not None
    deadline = time.monotonic() + 30
    while (book := index.reader.address_book(chunks)) is None:
        assert time.monotonic() < deadline, "the address book was never read"
        time.sleep(0.02)
    return book


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each scoped search was answered by masking (True) or by LanceDB's prefilter (False)."""
    taken: list[bool] = []
    masked = store_reads._postfiltered

    def recorded(*args: Any, **kwargs: Any) -> Any:
        rows = masked(*args, **kwargs)
        taken.append(rows is not None)
        return rows

    monkeypatch.setattr(store_reads, "_postfiltered", recorded)
    return taken


@pytest.mark.usefixtures("small_partitions")
def test_a_scoped_search_masks_the_unfiltered_candidates_and_finds_the_scopes_nearest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = Index(tmp_path, DIM, memory_budget=0)
    for first in range(0, 1000, 250):
        _write(index, first, 250)
    index.writes.refresh_indexes()
    stored = _stored(index)
    vectors = stored.column("vector").to_numpy(zero_copy_only=False)
    by_id = dict(zip(stored.column("id").to_pylist(), vectors, strict=True))
    _ready(index)
    taken = _recording(monkeypatch)
    rng = np.random.default_rng(3)
    found = {"masked": 0, "prefiltered": 0}
    masked = 0
    partial = SCOPES[:-1]  # the last holds every row: searched as no scope (test below)
    for where in partial:
        for _ in range(10):
            vector = rng.standard_normal(DIM).astype(np.float32)
            exact = _exact_inside(stored, vector, where)[:10]
            side = index.reader.vector_side(vector, 10, where, [*COLUMNS, "doc_class"])
            masked += taken.pop()
            ids = [row["id"] for row in side.rows]
            assert len(ids) == 10 and all(where.keeps(row) for row in side.rows)
            unit = vector / np.linalg.norm(vector)
            for row in side.rows:  # exact distances, nearest first
                stored_vector = np.asarray(by_id[row["id"]], dtype=np.float32)
                assert row["_distance"] == pytest.approx(1 - stored_vector / np.linalg.norm(stored_vector) @ unit,
                                                         abs=1e-5)
            assert [r["_distance"] for r in side.rows] == sorted(r["_distance"] for r in side.rows)
            assert set(side.rows[0]) == {*COLUMNS, "doc_class", "_distance"}  # nothing read for the mask left in
            found["masked"] += len(set(ids) & set(exact))
            setattr(index.reader, "address_book", lambda _: None)  # noqa: B010 - as LanceDB's prefilter answers
            prefiltered = index.reader.vector_side(vector, 10, where, COLUMNS)
            delattr(index.reader, "address_book")
            assert taken == []  # without a book nothing was masked
            found["prefiltered"] += len({row["id"] for row in prefiltered.rows} & set(exact))
    asked = 10 * 10 * len(partial)
    assert masked >= 0.8 * 10 * len(partial)  # a scope's rows may lie too far for the depth: then it prefilters
    assert found["masked"] / asked >= found["prefiltered"] / asked - 0.02  # the scope's nearest, as well found
    assert found["masked"] / asked >= 0.6  # random vectors: a third of the partitions holds most of the nearest
    assert set(index.reader.vector_side(vector, 10, SCOPES[0], COLUMNS).rows[0]) == {*COLUMNS, "_distance"}


@pytest.mark.usefixtures("small_partitions")
def test_a_scope_too_small_for_the_depth_is_prefiltered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = Index(tmp_path, DIM, memory_budget=0)
    _write(index, 0, 400)
    index.writes.refresh_indexes()
    _ready(index)
    taken = _recording(monkeypatch)
    monkeypatch.setattr(store_reads, "POSTFILTER_DEPTH", 100)
    one_file = Filter(_source(7)[0])
    side = index.reader.vector_side(np.ones(DIM, dtype=np.float32), 10, one_file, COLUMNS)
    assert taken == [False]
    assert sorted(row["id"] for row in side.rows) == ["k7:0", "k7:1", "k7:2"]  # every row of the file, however far


@pytest.mark.usefixtures("small_partitions")
def test_a_book_that_does_not_match_the_table_never_lets_a_row_outside_the_scope_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = Index(tmp_path, DIM, memory_budget=0)
    _write(index, 0, 400)
    index.writes.refresh_indexes()
    book = _ready(index)
    wrong = dataclasses.replace(book, sources=pa.array(["/docs/f1/" + s.split("/")[-1] for s in
                                                       book.sources.to_pylist()]))  # every row "inside" /docs/f1
    import lancedb

    reopened = lancedb.connect(str(tmp_path)).open_table("chunks")  # the same version through another handle
    assert reopened.version == book.version and index.reader.address_book(reopened) is None  # not trusted
    deadline = time.monotonic() + 30
    while index.reader.address_book(reopened) is None:  # read anew for that handle, then for the reader's own
        assert time.monotonic() < deadline, "no book was read for the other handle"
        time.sleep(0.02)
    _ready(index)
    monkeypatch.setattr(index.reader, "_book", (index.chunks(), wrong))
    taken = _recording(monkeypatch)
    where = Filter("/docs/f1")
    for seed in range(5):
        side = index.reader.vector_side(np.random.default_rng(seed).standard_normal(DIM), 10, where, COLUMNS)
        assert taken.pop() is False  # the rows read were checked, found outside, and the prefilter answered
        assert len(side.rows) == 10 and all(row["source_id"].startswith("/docs/f1/") for row in side.rows)


WRITER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
from test_address_book import _write
from appliance.storage.index import Index
index = Index(Path({db!r}), {dim}, memory_budget=0)
stop = time.monotonic() + {seconds}
first = 5000
while time.monotonic() < stop:
    _write(index, first, 30)
    index.writes.delete_sources([f"/docs/f{{n % 4}}/{{n:05d}}.md" for n in range(first - 30, first - 20)])
    first += 30
print(first)
"""


@pytest.mark.usefixtures("small_partitions")
def test_scoped_searches_stay_inside_their_scope_while_another_process_writes(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    index = Index(tmp_path, DIM, memory_budget=0)
    _write(index, 0, 600)
    index.writes.refresh_indexes()
    _ready(index)
    taken = _recording(monkeypatch)
    code = WRITER.format(root=str(ROOT), tests=str(Path(__file__).parent), db=str(tmp_path), dim=DIM, seconds=6)
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    rng = np.random.default_rng(11)
    searched = 0
    while writer.poll() is None:
        for where in (Filter("/docs/f1"), Filter("/docs/f2", "manual")):
            with index.reader.query_view():
                side = index.reader.vector_side(rng.standard_normal(DIM), 10, where, [*COLUMNS, "doc_class"])
            assert len(side.rows) == 10 and all(where.keeps(row) for row in side.rows)
            searched += 1
    out, err = writer.communicate()
    assert writer.returncode == 0, err
    assert int(out) > 5030 and searched > 10  # the writer committed while the reader searched
    book = _ready(index)  # the book of the last version, read from the one before
    chunks = index.chunks()
    assert chunks is not None and book.version == chunks.version
    _assert_book_matches(book, _stored(index))
    assert any(taken)


def test_no_book_is_read_for_a_table_searched_without_a_vector_index(tmp_path: Path) -> None:
    """A flat search (a table too small for the vector index) has nothing to mask: no thread reads a book for it."""
    index = Index(tmp_path, DIM, memory_budget=0)
    _write(index, 0, 40)
    where = Filter("/docs/f1")
    side = index.reader.vector_side(np.ones(DIM, dtype=np.float32), 5, where, [*COLUMNS, "doc_class"])
    assert len(side.rows) == 5 and all(where.keeps(row) for row in side.rows)
    time.sleep(0.3)
    assert index.reader._book is None
    assert not any(thread.name == "address-book" for thread in threading.enumerate())


@pytest.mark.usefixtures("small_partitions")
def test_a_scope_of_every_row_is_searched_as_none_once_the_book_says_so(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent often scopes to the whole folder indexed: past the replica both sides then search unfiltered
    (no prefilter, no mask) and answer as an unscoped search does."""
    index = Index(tmp_path, DIM, memory_budget=0)
    _write(index, 0, 400)
    index.writes.refresh_indexes()
    _ready(index)
    taken = _recording(monkeypatch)
    filters: list[Filter | None] = []
    nearest, bm25 = store_reads._nearest, store_reads._bm25
    monkeypatch.setattr(store_reads, "_nearest", lambda chunks, vector, limit, where, *a, **k: (
        filters.append(where), nearest(chunks, vector, limit, where, *a, **k))[1])
    monkeypatch.setattr(store_reads, "_bm25", lambda chunks, terms, limit, where, *a, **k: (
        filters.append(where), bm25(chunks, terms, limit, where, *a, **k))[1])
    everything = Filter("/docs")
    for seed in range(3):
        vector = np.random.default_rng(seed).standard_normal(DIM)
        scoped, whole = (index.reader.vector_side(vector, 10, w, COLUMNS) for w in (everything, None))
        assert [r["id"] for r in scoped.rows] == [r["id"] for r in whole.rows] and scoped.best == whole.best
        words = f"passag n{seed * 7}"
        scoped, whole = (index.reader.keyword_side(words, 10, w, COLUMNS) for w in (everything, None))
        assert [r["id"] for r in scoped.rows] == [r["id"] for r in whole.rows] and scoped.rows
    assert taken == [] and filters == [None] * len(filters)  # never masked, never prefiltered
    part = Filter("/docs/f1")
    index.reader.keyword_side("passag", 10, part, COLUMNS)
    assert filters[-1] == part  # a scope of part of the rows is still prefiltered
