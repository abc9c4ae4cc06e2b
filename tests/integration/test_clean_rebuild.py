"""`sync --clean` rebuilds without losing what the disk cannot give back, and never
pulls an index from under a reader in another process."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from appliance.errors import IndexCorrupt

pytestmark = pytest.mark.model


def _docs(root: Path, n: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    topics = ["reindeer herding", "glacier hiking", "sourdough baking", "violin making", "beekeeping"]
    for i in range(n):
        (root / f"doc{i:03d}.md").write_text(f"# Note {i}\n\nThis note {i} is about {topics[i % len(topics)]} "
                                             f"and item number {i}.\n")
    return root


def test_clean_keeps_ingested_data_and_urls(make_app, tmp_path: Path) -> None:
    app = make_app(_docs(tmp_path / "docs", 3))
    app.sync()
    app.ingest_data("notes/meeting-7", "# Meeting 7\n\nThe zorblatt budget was approved for the harbour crane.",
                    "markdown")
    report = app.sync(clean=True)
    assert report.ok and report.updated >= 1
    kinds = {s.source_id: s.source_kind for s in app.index.registry.source_rows()}
    assert kinds["notes/meeting-7"] == "data" and sum(k == "file" for k in kinds.values()) == 3
    hit = app.search("zorblatt harbour crane budget", top_k=1).results[0]
    assert hit.source == "notes/meeting-7"
    assert "harbour crane" in app.read("notes/meeting-7", is_source=True).content


def test_clean_refuses_to_drop_unreadable_data_items_and_names_them(make_app, tmp_path: Path) -> None:
    app = make_app(_docs(tmp_path / "docs", 2))
    app.sync()
    app.ingest_data("notes/only-copy", "The only copy of this note is in the index.", "text")
    data_dir = tmp_path / "index" / "chunks.lance" / "data"
    for f in data_dir.iterdir():
        f.write_bytes(b"damaged")
    fresh = make_app(tmp_path / "docs")
    with pytest.raises(IndexCorrupt) as caught:
        fresh.sync(clean=True)
    assert "notes/only-copy" in caught.value.message and "--discard-unrecoverable" in caught.value.hint
    assert {s.source_id for s in fresh.index.registry.source_rows()} >= {"notes/only-copy"}  # nothing dropped
    report = fresh.sync(clean=True, discard_unrecoverable=True)
    assert report.ok and {s.source_kind for s in fresh.index.registry.source_rows()} == {"file"}
    assert fresh.search("item number", top_k=1).results


@pytest.mark.slow  # a `sync --clean` subprocess over 40 files
def test_readers_keep_answering_while_another_process_cleans(make_app, tmp_path: Path, models_dir: Path) -> None:
    docs = _docs(tmp_path / "docs", 40)
    app = make_app(docs)
    app.sync()
    env = {**os.environ, "BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "index"), "MODELS_DIR": str(models_dir)}
    answered, failed = [0], []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                app.search("glacier hiking", top_k=3)
                app.status()
                answered[0] += 1
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                failed.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.05)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "appliance", "sync", "--clean", "--json"], env=env,
                              capture_output=True, text=True, timeout=600)
    finally:
        done.set()
        thread.join()
    assert proc.returncode == 0, proc.stderr[-2000:]
    print(f"search+status rounds during the rebuild: {answered[0]} answered, {len(failed)} failed")
    assert failed == [], failed[:5]
    assert answered[0] > 10
    assert app.status().index.source_count == 40


@pytest.mark.slow  # a `sync` subprocess
def test_status_and_list_files_follow_another_process_within_two_seconds(make_app, tmp_path: Path,
                                                                        models_dir: Path) -> None:
    docs = _docs(tmp_path / "docs", 5)
    app = make_app(docs)
    app.sync()
    assert app.status().index.source_count == 5
    assert {f.state for f in app.list_files().files} == {"indexed"}
    _docs(docs, 12)  # 7 more files, synced by another process
    env = {**os.environ, "BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "index"), "MODELS_DIR": str(models_dir)}
    proc = subprocess.run([sys.executable, "-m", "appliance", "sync", "--json"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    time.sleep(2.0)
    index = app.status().wire()["index"]
    assert (index["sourceCount"], index["chunkCount"]) == (12, 12)
    assert "consistencyWarning" not in index
    assert {f.state for f in app.list_files().files} == {"indexed"}
