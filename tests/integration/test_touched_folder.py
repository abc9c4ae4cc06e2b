"""A folder whose files got new times but kept their bytes (a copy without -p, a fresh checkout, `touch`):
the re-sync records the new times in a few writes, not one write a file (190 ms a file at 2,000 files)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from appliance.sync import indexing
from tests.integration.test_emptied_root import _app


def test_touched_files_are_recorded_in_writes_of_many_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexing, "REFRESH_BATCH", 3)
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(8):
        (docs / f"note-{n}.md").write_text(f"# Note {n}\n\nWhat note {n} says about lighthouse keeping.\n")
    app = _app(tmp_path, docs)
    assert app.sync().added == 8
    sources = app.index.tables.sources()
    assert sources is not None
    before = sources.version

    later = time.time_ns() + 10**9
    for n in range(7):
        os.utime(docs / f"note-{n}.md", ns=(later, later))
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
