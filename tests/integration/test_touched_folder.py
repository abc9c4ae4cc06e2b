"""A folder whose files got new times but kept their bytes (a copy without -p, a fresh checkout, `touch`):
the re-sync records the new times in a few writes, not one write a file (354 s for 2,000 files)."""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.config import replica_budget
from appliance.service import Appliance
from appliance.storage.index import Index
from appliance.sync import indexing
from tests.integration.test_emptied_root import _app


def _synced_notes(tmp_path: Path, count: int) -> tuple[Path, Appliance]:
    """`count` short notes in tmp_path/docs, synced once (plumbing embedder)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(count):
        (docs / f"note-{n}.md").write_text(f"# Note {n}\n\nWhat note {n} says about lighthouse keeping.\n")
    app = _app(tmp_path, docs)
    assert app.sync().added == count
    return docs, app


def _touch(paths: list[Path]) -> int:
    """A new mtime for each path, bytes unchanged; the time given."""
    later = time.time_ns() + 10**9
    for path in paths:
        os.utime(path, ns=(later, later))
    return later


def test_touched_files_are_recorded_in_writes_of_many_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexing, "REFRESH_BATCH", 3)
    docs, app = _synced_notes(tmp_path, 8)
    sources = app.index.tables.sources()
    assert sources is not None
    before = sources.version

    later = _touch([docs / f"note-{n}.md" for n in range(7)])
    (docs / "note-7.md").write_text("# Note 7\n\nNote 7 now speaks of harbour pilots.\n")
    touched = app.sync()
    assert (touched.refreshed, touched.updated, touched.unchanged) == (7, 1, 0)

    sources.checkout_latest()
    refresh_commits = sources.version - before - 1  # the edited file's own write is one commit
    assert refresh_commits == 3  # 7 files in writes of at most 3

    again = app.sync()  # the new times were recorded: nothing to do
    assert (again.unchanged, again.refreshed, again.updated) == (8, 0, 0)
    rows = app.index.registry.sources_by_id([str(docs / f"note-{n}.md") for n in range(7)])
    assert {row.mtime_ns for row in rows.values()} == {later}


def _other_writer(db: str, dim: int, started: Any, stop: Any, queue: Any) -> None:
    """Another process (a CLI `ingest`, the server) writing the same index until told to stop."""
    from appliance.storage.tables import SourceRow, chunk_schema

    index = Index(Path(db), dim, memory_budget=replica_budget())
    written, error = 0, ""
    vector = [1.0] + [0.0] * (dim - 1)
    try:
        while not stop.is_set():
            sid = f"other-{written}"
            row = {f.name: None for f in chunk_schema(dim)} | {
                "id": f"{sid}:0", "source_id": sid, "source_kind": "data", "chunk_index": 0, "text": f"text of {sid}",
                "keywords": sid, "parent_id": f"{sid}:s0", "ingested_at": time.time(), "vector": vector}
            index.writes.replace_sources([SourceRow(source_id=sid, source_kind="data", chunk_count=1)], [row])
            written += 1
            started.set()
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with it
        error = f"{type(exc).__name__}: {exc}"
    queue.put((written, error))


@pytest.mark.slow  # a second process
def test_touched_files_are_recorded_while_another_process_writes(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexing, "REFRESH_BATCH", 7)
    docs, app = _synced_notes(tmp_path, 60)
    later = _touch(list(docs.iterdir()))

    ctx = mp.get_context("spawn")
    started, stop, queue = ctx.Event(), ctx.Event(), ctx.Queue()
    dim = app.resources.embedder.spec.dim
    writer = ctx.Process(target=_other_writer, args=(str(tmp_path / "db"), dim, started, stop, queue))
    writer.start()
    try:
        assert started.wait(120), "the other writer never wrote"
        touched = app.sync()
    finally:
        stop.set()
        written, error = queue.get(timeout=120)
        writer.join(60)
    assert error == "" and written > 0
    assert (touched.refreshed, touched.updated, touched.added) == (60, 0, 0)
    rows = app.index.registry.sources_by_id([str(p) for p in docs.iterdir()])
    assert len(rows) == 60 and {row.mtime_ns for row in rows.values()} == {later}
    fresh = Index(tmp_path / "db", dim, memory_budget=replica_budget())  # reads the latest version of each table
    others = fresh.registry.sources_by_id([f"other-{n}" for n in range(written)])
    assert len(others) == written  # nothing the other process wrote was lost to the refresh's upserts
    assert fresh.registry.chunk_counts() == {str(p): 1 for p in docs.iterdir()} | dict.fromkeys(others, 1)
    assert app.sync().unchanged == 60
