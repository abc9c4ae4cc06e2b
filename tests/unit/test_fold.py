"""A fold compacts only the small fragments (writes.COMPACT_TARGET_ROWS), so its cost follows what was written
since the last one, not the size of the table; and the Lance that does it (pylance) is the one inside LanceDB."""
from __future__ import annotations

import re
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

    def slow_fold(table: Any) -> None:
        folding.set()
        waited.append(written.wait(10))  # False: the write could not go on while this fold ran
        real_fold(table)

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
