"""Text embedded once is never embedded again: vectors are reused by content (appliance/sync/reuse.py).

Real LanceDB throughout; the deterministic HashEmbedder counts what reaches the model
(the counts come from the model's side, not from the report under test), and one test
with the real model shows a reused vector is the one the model computes for that text.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from appliance.config import load_settings, replica_budget
from appliance.service import Appliance
from appliance.storage.index import Index
from tests.conftest import ROOT, app_factory
from tests.fixtures.embedders import MODELS_DIR, HashEmbedder

PARAGRAPH = ("Section {n} explains how the {topic} of unit {n} is checked: the operator reads the gauge, writes "
             "the value in the log, compares it with the limit of the previous week and reports any drift. ")


def note(topic: str, sections: int = 4) -> str:
    """A Markdown note whose every paragraph is different."""
    return f"# {topic.title()} checks\n\n" + "\n\n".join(
        f"## Part {n}\n\n" + "".join(PARAGRAPH.format(n=n, topic=topic) + f"Reading {k} closes the check. "
                                      for k in range(3)) for n in range(sections)) + "\n"


def build(tmp_path: Path, embedder: HashEmbedder, *roots: Path, **env: str) -> Appliance:
    roots = roots or (tmp_path / "docs",)
    for root in roots:
        root.mkdir(parents=True, exist_ok=True)
    settings = load_settings({"BASE_DIRS": json.dumps([str(r) for r in roots]), "DB_PATH": str(tmp_path / "index"),
                              "MODELS_DIR": str(MODELS_DIR), "CHUNK_TOKEN_BUDGET": "64", **env})
    return Appliance(settings, embedder=embedder)


def rows(app: Appliance, where: str = "true") -> list[dict[str, Any]]:
    return app.index.reader.chunk_rows(where, ["source_id", "chunk_index", "text", "embed_key", "vector"])


def vectors_by_text(app: Appliance) -> dict[str, list[float]]:
    return {r["text"]: list(r["vector"]) for r in rows(app)}


def folder(root: Path, name: str, files: int = 6) -> Path:
    target = root / name
    target.mkdir(parents=True)
    for n in range(files):
        (target / f"note-{n}.md").write_text(note(f"{name} topic {n}"), "utf-8")
    # a plain-text file: its title is not in its text, so chunk 0 is embedded with the title folded in
    (target / "plain.txt").write_text("Plain words about valves.\n\n" + "\n\n".join(
        PARAGRAPH.format(n=n, topic="valve") for n in range(90, 94)))
    return target


def test_editing_one_paragraph_embeds_only_the_chunks_that_changed(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    app = build(tmp_path, embedder)
    doc = tmp_path / "docs" / "manual.md"
    doc.write_text(note("pressure", sections=20), "utf-8")
    first = app.sync()
    before = {r["embed_key"] for r in rows(app)}
    assert first.chunks_embedded == len(embedder.passages) == first.chunks > 20 and first.chunks_reused == 0

    embedder.passages.clear()
    revised = note("pressure", sections=20).replace("Section 7 explains", "Section 7, revised in May, explains", 1)
    doc.write_text(revised)
    second = app.sync()
    after = rows(app)
    changed = [r for r in after if r["embed_key"] not in before]
    assert 1 <= len(changed) < len(after) / 4
    assert second.chunks_embedded == len(embedder.passages) == len(changed)
    assert second.chunks_reused == len(after) - len(changed) and second.chunks == len(after)
    assert all("revised in May" in t or "Section 7" in t for t in embedder.passages)
    assert second.to_dict()["chunksEmbedded"] == len(changed)


@pytest.mark.slow  # several syncs, each with its conversion worker
def test_renamed_moved_and_copied_files_and_a_second_root_embed_nothing(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    docs, second_root = tmp_path / "docs", tmp_path / "mirror"
    app = build(tmp_path, embedder, docs, second_root)
    folder(docs, "papers")
    first = app.sync()
    stored = vectors_by_text(app)
    assert first.chunks_embedded == first.chunks == len(stored) > 20

    def sync_without_the_model() -> Any:
        embedder.passages.clear()
        report = app.sync()
        assert embedder.passages == [] and report.chunks_embedded == 0, embedder.passages
        assert vectors_by_text(app) == stored  # every text keeps the vector it was given the first time
        return report

    (docs / "papers").rename(docs / "renamed")
    renamed = sync_without_the_model()
    assert (renamed.added, renamed.deleted, renamed.chunks_reused) == (7, 7, first.chunks)
    assert not rows(app, "starts_with(source_id, '" + str(docs / "papers") + "/')")

    (docs / "elsewhere").mkdir()
    (docs / "renamed" / "note-3.md").rename(docs / "elsewhere" / "moved.md")
    assert sync_without_the_model().chunks_reused > 0

    shutil.copytree(docs / "renamed", docs / "copy")
    copied = sync_without_the_model()
    assert copied.added == 6 and copied.chunks_reused == copied.chunks > 0

    shutil.copytree(docs / "renamed", second_root / "renamed")
    assert sync_without_the_model().added == 6
    moved = len(rows(app, "source_id LIKE '%moved.md'"))
    assert app.index.registry.count_chunks() == 3 * first.chunks - 2 * moved  # three copies, one of them without note-3


def test_rows_of_an_index_written_before_embed_key_existed_are_reused(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    app = build(tmp_path, embedder)
    folder(tmp_path / "docs", "papers")
    app.sync()
    stored = vectors_by_text(app)
    lancedb.connect(str(tmp_path / "index")).open_table("chunks").drop_columns(["embed_key"])

    old = build(tmp_path, embedder)  # opening adds the column back, null on every old row
    assert all(r["embed_key"] is None for r in rows(old))
    embedder.passages.clear()
    (tmp_path / "docs" / "papers").rename(tmp_path / "docs" / "renamed")
    report = old.sync()
    assert embedder.passages == [] and report.chunks_embedded == 0 and report.chunks_reused == len(stored)
    assert vectors_by_text(old) == stored
    assert all(r["embed_key"] for r in rows(old))  # rewritten rows carry their key


@pytest.mark.slow  # several syncs, each with its conversion worker
def test_a_change_of_model_or_scheme_embeds_everything_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    folder(docs, "papers")
    first = build(tmp_path, HashEmbedder()).sync()

    other = HashEmbedder(model_id="test/another-model")
    report = build(tmp_path, other).sync(full=True)
    assert report.chunks_embedded == len(other.passages) == report.chunks == first.chunks and report.chunks_reused == 0

    for module in ("core", "sync.plan", "sync.indexing", "health"):  # every module that reads the scheme
        monkeypatch.setattr(f"appliance.{module}.SCHEME_VERSION", "structure-v99")
    rescheme = HashEmbedder(model_id="test/another-model")
    report = build(tmp_path, rescheme).sync()
    assert report.updated == 7 and report.chunks_embedded == len(rescheme.passages) == report.chunks
    assert report.chunks_reused == 0

    clean = HashEmbedder(model_id="test/another-model")
    report = build(tmp_path, clean).sync(clean=True)
    assert report.chunks_embedded == len(clean.passages) == report.chunks and report.chunks_reused == 0


def test_a_text_repeated_within_one_sync_is_embedded_once(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    app = build(tmp_path, embedder)
    folder(tmp_path / "docs", "a")
    shutil.copytree(tmp_path / "docs" / "a", tmp_path / "docs" / "b")
    report = app.sync()
    assert report.chunks == 2 * report.chunks_embedded == 2 * len(embedder.passages) == 2 * len(set(embedder.passages))
    assert report.chunks_reused == report.chunks_embedded


KILLED_SYNC = """
import sys, time
sys.path[:0] = [{root!r}]
from tests.fixtures.embedders import HashEmbedder
from tests.integration.test_reuse import build
from pathlib import Path
if __name__ == "__main__":
    build(Path({tmp!r}), HashEmbedder(delay=2.0)).sync()
"""


@pytest.mark.slow  # a sync killed in another process, then one more
def test_a_sync_after_a_killed_one_reuses_what_the_killed_one_left(tmp_path: Path) -> None:
    """A folder renamed and new files added; the sync is killed while it embeds the new files
    (they sort first): the next one embeds only the new chunks no run has written, and takes
    the renamed files' vectors from the old rows, which a killed sync no longer deletes first."""
    docs = tmp_path / "docs"
    folder(docs, "papers")
    embedder = HashEmbedder()
    first = build(tmp_path, embedder).sync()
    (docs / "papers").rename(docs / "renamed")
    folder(docs, "aa-new", files=30)
    script = tmp_path / "killed_sync.py"
    script.write_text(KILLED_SYNC.format(root=str(ROOT), tmp=str(tmp_path)))
    proc = subprocess.Popen([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            start_new_session=True)
    deadline = time.monotonic() + 240
    watch = Index(tmp_path / "index", embedder.spec.dim, memory_budget=replica_budget())
    try:
        first_batch = f"starts_with(source_id, '{docs / 'aa-new'}/')"
        while watch.registry.count_chunks(first_batch) == 0:  # a first batch written
            assert proc.poll() is None, "the sync ended before it could be killed"
            assert time.monotonic() < deadline, "the sync wrote no embedded chunk in time"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    app = build(tmp_path, embedder)
    written = {r["embed_key"] for r in rows(app)}
    embedder.passages.clear()
    report = app.sync()
    final = rows(app)
    never_written = {r["embed_key"] for r in final} - written
    assert report.ok and report.chunks_embedded == len(embedder.passages) == len(never_written) > 0
    assert report.chunks_reused >= first.chunks and report.chunks_embedded + report.chunks_reused == report.chunks
    assert {r["source_id"].split("/")[-2] for r in final} == {"renamed", "aa-new"}
    assert app.status().index.consistency_warning is None


WRITER = """
import sys
sys.path[:0] = [{root!r}]
from tests.fixtures.embedders import HashEmbedder
from tests.integration.test_reuse import build
from pathlib import Path
if __name__ == "__main__":
    app = build(Path({tmp!r}), HashEmbedder())
    for n in range(12):
        app.ingest_data(f"item-{{n}}", f"Item {{n}} notes: the pump at station {{n}} was serviced." * 20)
        if n % 4 == 3:
            app.delete(f"item-{{n - 1}}", is_source=True)
"""


@pytest.mark.slow  # two processes writing for ~30 s
def test_a_writer_in_another_process_during_a_reusing_sync_loses_nothing(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    folder(docs, "papers", files=20)
    embedder = HashEmbedder(delay=0.05)
    app = build(tmp_path, embedder)
    first = app.sync()
    stored = vectors_by_text(app)
    (docs / "papers").rename(docs / "renamed")
    folder(docs, "aa-new", files=10)
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(root=str(ROOT), tmp=str(tmp_path)))
    writer = subprocess.Popen([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=str(ROOT)))
    embedder.passages.clear()
    report = app.sync()
    assert writer.wait(300) == 0
    assert report.ok and report.chunks_reused >= first.chunks
    assert all(stored[t] == v for t, v in vectors_by_text(app).items() if t in stored)
    sources = {s.source_id for s in app.index.registry.source_rows()}
    items = {f"item-{n}" for n in range(12) if n % 4 != 2}
    moved = {str(p) for p in (docs / "renamed").iterdir()} | {str(p) for p in (docs / "aa-new").iterdir()}
    assert sources == items | moved
    counts = app.index.registry.chunk_counts()
    assert all(counts.get(s.source_id) == s.chunk_count for s in app.index.registry.source_rows())


@pytest.mark.slow  # the real model, two indexes
def test_a_reused_vector_is_the_one_the_model_computes(tmp_path: Path, models_dir: Path,
                                                      real_embedder) -> None:  # type: ignore[no-untyped-def]
    """Copied text takes the original's vector bit for bit, and a fresh index that embeds the
    copy alone gets the same bits from the model."""
    manual = ("# Gasket manual\n\n" + "\n\n".join(f"## Step {n}\n\nTighten bolt {n} of the flange to {20 + n} Nm, "
                                               "then check the gasket seat for leaks and note the torque." * 3
                                               for n in range(6)))
    original = app_factory(tmp_path / "a", models_dir, real_embedder)()
    (tmp_path / "a" / "docs" / "manual.md").write_text(manual)
    original.sync()
    (tmp_path / "a" / "docs" / "copy.md").write_text(manual)
    report = original.sync()
    assert report.chunks_embedded == 0 and report.chunks_reused == report.chunks > 1
    reused = {r["chunk_index"]: r["vector"] for r in rows(original, "source_id LIKE '%copy.md'")}
    first = {r["chunk_index"]: r["vector"] for r in rows(original, "source_id LIKE '%manual.md'")}

    fresh_app = app_factory(tmp_path / "b", models_dir, real_embedder)()
    (tmp_path / "b" / "docs" / "copy.md").write_text(manual)
    assert fresh_app.sync().chunks_embedded == len(reused)
    fresh = {r["chunk_index"]: r["vector"] for r in rows(fresh_app)}
    assert reused.keys() == fresh.keys() == first.keys()
    for i, vector in reused.items():
        assert np.array_equal(np.asarray(vector, np.float32), np.asarray(fresh[i], np.float32)), i
        assert np.array_equal(np.asarray(vector, np.float32), np.asarray(first[i], np.float32)), i
