"""A fold compacts only the small fragments (writes.COMPACT_TARGET_ROWS), so its cost follows what was written
since the last one, not the size of the table; and the Lance that does it (pylance) is the one inside LanceDB."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import lance
import pytest

from appliance.storage import writes
from appliance.storage.index import Index
from tests.fixtures.chunks import write_passages
from tests.fixtures.embedders import HashEmbedder

EMBEDDER = HashEmbedder()


def _write(index: Index, source_id: str, texts: list[str]) -> None:
    write_passages(index, EMBEDDER, source_id, texts)


def _fragments(index: Index) -> dict[str, int]:
    """Each fragment's data file and its rows."""
    chunks = index.tables.chunks()
    assert chunks is not None
    return {f.data_files()[0].path: f.count_rows() for f in chunks.to_lance().get_fragments()}


def test_a_fold_merges_the_small_fragments_and_leaves_the_large_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writes, "COMPACT_TARGET_ROWS", 20)
    index = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=0)
    _write(index, "/docs/big.md", [f"bearing {n} runs warm" for n in range(30)])
    index.writes.refresh_indexes(fold_now=True)
    (large, rows), = _fragments(index).items()
    assert rows == 30

    for n in range(6):
        _write(index, f"/docs/{n}.md", [f"pump {n} needs oil", f"valve {n} is stuck"])
    assert len(_fragments(index)) == 7
    index.writes.refresh_indexes(fold_now=True)

    after = _fragments(index)
    assert after.pop(large) == 30  # the large fragment was not rewritten
    assert list(after.values()) == [12]  # the six small ones are one now
    assert index.writes.unindexed_rows() == 0
    assert index.registry.count_chunks() == 42
    hits = index.reader.keyword_search("valve", 20, None, ["id"])
    assert {h["id"] for h in hits} == {f"/docs/{n}.md:1" for n in range(6)}


def test_lancedb_writes_with_the_lance_that_pylance_is(tmp_path: Path) -> None:
    # a manifest records the library that wrote it ("lance" and its version): LanceDB's own commits must come from
    # the same Lance as the fold's, or one would write what the other cannot read
    index = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=0)
    _write(index, "/docs/a.md", ["pump oil"])
    manifest = max((tmp_path / "chunks.lance" / "_versions").glob("*.manifest"), key=lambda p: p.stat().st_mtime)
    writers = set(re.findall(rb"lance[\x00-\x1f]{1,3}(\d+\.\d+\.\d+)", manifest.read_bytes()))
    assert writers == {lance.__version__.encode()}


def test_folds_add_segments_that_a_refresh_merges_past_the_limit_with_the_same_scores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writes, "SEGMENTS_MAX", 2)
    index = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=0)

    def segments() -> dict[str, int]:
        chunks = index.tables.chunks()
        assert chunks is not None
        return {i.name: i.num_segments or 1 for i in chunks.list_indices()}

    def scores() -> list[tuple[str, float]]:
        return [(h["id"], round(h["_score"], 5)) for h in index.reader.keyword_search("pump oil", 20, None, ["id"])]

    for n in range(5):  # folds inside a long run: one more BM25 segment each, no merging up to the mid-run limit
        _write(index, f"/docs/{n}.md", [f"pump {n} needs oil", f"valve {n} is stuck", "oil " * n + "pump"])
        index.writes.refresh_indexes(fold_now=True, segments_max=writes.SEGMENTS_MAX_MID_RUN)
    assert segments()["keywords_idx"] == 5 and segments()["id_idx"] == 1  # B-trees stay whole
    split = scores()
    assert len(split) == 10  # every passage with "pump" or "oil"

    index.writes.refresh_indexes()  # the end of a sync: each index is merged into one
    assert set(segments().values()) == {1}
    assert scores() == split  # BM25 counts over the whole index in either shape
    _write(index, "/docs/9.md", ["pump nine"])
    index.writes.refresh_indexes(fold_now=True)  # outside a long run BM25 stays one segment
    assert segments()["keywords_idx"] == 1 and len(scores()) == 11


def test_a_write_goes_on_while_this_process_folds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a round's fold runs on a thread beside its writer (appliance/sync/rounds.py): the writer must not wait for it
    index = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=0)
    _write(index, "/docs/a.md", ["pump oil"])
    folding, written = threading.Event(), threading.Event()
    real_fold, waited = writes.fold, []

    def slow_fold(table: Any, **options: Any) -> None:
        folding.set()
        waited.append(written.wait(10))  # False: the write could not go on while this fold ran
        real_fold(table, **options)

    monkeypatch.setattr(writes, "fold", slow_fold)
    folder = threading.Thread(target=index.writes.refresh_indexes, kwargs={"fold_now": True})
    folder.start()
    assert folding.wait(30)
    _write(index, "/docs/b.md", ["valve stuck"])
    written.set()
    folder.join(60)
    assert not folder.is_alive() and waited and all(waited)
    assert index.registry.count_chunks() == 2
    index.writes.refresh_indexes(fold_now=True)
    assert index.writes.unindexed_rows() == 0


def _deleted_rows(index: Index) -> int:
    chunks = index.tables.chunks()
    assert chunks is not None
    return sum(f.metadata.num_deletions for f in chunks.to_lance().get_fragments())


def test_only_a_settling_refresh_rewrites_a_fragment_holding_a_few_deleted_rows(tmp_path: Path) -> None:
    # while any fragment holds a deleted row, LanceDB masks every row a search scans (writes.SETTLED_DELETIONS)
    index = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=0)
    _write(index, "/docs/big.md", [f"bearing {n} runs warm" for n in range(30)])
    index.writes.refresh_indexes(fold_now=True)
    chunks = index.tables.chunks()
    assert chunks is not None
    chunks.delete("id = '/docs/big.md:7'")  # a thirtieth of the fragment: under Lance's own threshold
    assert _deleted_rows(index) == 1

    index.writes.refresh_indexes(fold_now=True, segments_max=writes.SEGMENTS_MAX_MID_RUN)  # a fold inside a run
    assert _deleted_rows(index) == 1
    index.writes.refresh_indexes()  # a refresh that is not a sync's end: nothing due
    assert _deleted_rows(index) == 1

    index.writes.refresh_indexes(settle=True)  # a sync's end: due because of the deleted row alone
    assert _deleted_rows(index) == 0
    assert not writes.has_deletions(index.tables.chunks())
    assert index.registry.count_chunks() == 29 and index.writes.unindexed_rows() == 0
    hits = index.reader.keyword_search("bearing", 40, None, ["id"])
    assert len(hits) == 29 and "/docs/big.md:7" not in {h["id"] for h in hits}
    index.writes.refresh_indexes(settle=True)  # settled: nothing left to fold
    assert index.tables.chunks().version == chunks.version


def test_a_sync_that_replaced_and_removed_files_leaves_no_deleted_rows(make_app: Any, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(12):
        (docs / f"pump{n}.md").write_text(f"# Pump {n}\n\nPump {n} needs oil every {n + 2} weeks.\n", encoding="utf-8")
    app = make_app(docs)
    assert app.sync().added == 12
    (docs / "pump3.md").write_text("# Pump 3\n\nPump 3 was swapped for a diaphragm valve.\n", encoding="utf-8")
    (docs / "pump5.md").unlink()
    report = app.sync()
    assert (report.updated, report.deleted) == (1, 1)
    for table in (app.index.tables.chunks(), app.index.tables.sources()):
        assert table is not None and not writes.has_deletions(table)
    found = {h.source for h in app.search("diaphragm valve", top_k=3).results}
    assert str(docs / "pump3.md") in found
    assert app.index.registry.count_chunks() == 11


WRITER = """
import sys, time
from pathlib import Path
from appliance.storage.index import Index
from tests.fixtures.chunks import write_passages
from tests.fixtures.embedders import HashEmbedder
index, embedder = Index(Path({db!r}), HashEmbedder().spec.dim, memory_budget=0), HashEmbedder()
stop, n, deleted = time.monotonic() + {seconds}, 0, 0
while time.monotonic() < stop:
    write_passages(index, embedder, f"/docs/w{{n}}.md", [f"gasket {{n}} leaks", f"seal {{n}} holds", f"flange {{n}}"])
    if n % 3 == 2:
        index.writes.delete_sources([f"/docs/w{{n - 1}}.md"])
        deleted += 1
    if n % 7 == 6:
        index.writes.refresh_indexes(settle=True)  # the other process replaces the indexes too
    n += 1
print(n, deleted)
"""


def test_settling_refreshes_lose_no_row_while_another_process_writes_and_deletes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_fold, settling = writes.fold, []

    def counted(table: Any, **options: Any) -> None:
        settling.append(options.get("settle"))
        real_fold(table, **options)

    monkeypatch.setattr(writes, "fold", counted)
    index = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=0)
    _write(index, "/docs/big.md", [f"bearing {n} runs warm" for n in range(30)])
    index.writes.refresh_indexes(fold_now=True)
    root = Path(__file__).resolve().parents[2]
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER.format(db=str(tmp_path), seconds=5))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
                              env={**os.environ, "PYTHONPATH": str(root)})
    settled, handles = 0, set()
    while writer.poll() is None:
        index.writes.refresh_indexes(settle=True)  # races the writer's commits: a lost race is retried or left
        with index.reader.query_view():  # a query renews the session once a fold replaced an index it read
            assert len(index.reader.keyword_search("bearing", 40, None, ["id"])) == 30
            handles.add(id(index.tables.chunks()))
        settled += 1
    out, err = writer.communicate()
    assert writer.returncode == 0, err
    written, deleted = map(int, out.split())
    assert written > 6 and deleted > 1 and settled > 2
    assert settling.count(True) > 1  # folds that rewrote the writer's deletions while it went on
    assert len(handles) > 1  # sessions renewed while both processes replaced indexes
    index.tables.refresh_handles()  # this process's handles see another's commits within READ_CONSISTENCY_S
    index.writes.refresh_indexes(settle=True)
    assert not writes.has_deletions(index.tables.chunks())
    assert index.registry.count_chunks() == 30 + 3 * (written - deleted)
    gaskets = {h["id"] for h in index.reader.keyword_search("gasket", 3 * written, None, ["id"])}
    assert len(gaskets) == written - deleted and "/docs/w1.md:0" not in gaskets


def test_a_reader_renews_its_session_once_a_fold_replaced_an_index_it_read(tmp_path: Path) -> None:
    # LanceDB keeps every index a session read in its cache after a fold replaced it (Tables.renew_session)
    index = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=0)
    _write(index, "/docs/big.md", [f"bearing {n} runs warm" for n in range(30)])
    index.writes.refresh_indexes(fold_now=True)

    def bearings() -> set[str]:
        with index.reader.query_view():
            return {h["id"] for h in index.reader.keyword_search("bearing", 40, None, ["id"])}

    assert len(bearings()) == 30
    first = index.tables.chunks()
    _write(index, "/docs/small.md", ["bearing oil"])  # a new version, every index still there
    assert len(bearings()) == 31 and index.tables.chunks() is first

    first.delete("id = '/docs/big.md:7'")
    index.writes.refresh_indexes(settle=True)  # the rewrite remaps every index: new ones replace the old
    assert len(bearings()) == 30
    renewed = index.tables.chunks()
    assert renewed is not first
    assert len(bearings()) == 30 and index.tables.chunks() is renewed  # once: the new indexes are its own
