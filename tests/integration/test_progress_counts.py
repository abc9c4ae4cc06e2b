"""A running sync counts files and chunks when they are stored, not when converted (issue 30, Found 3).

The model is the slow part of a sync: conversion runs far ahead of it, so a count taken at
conversion said "every file done, 2 s left" for most of a first sync. A deterministic embedder
that takes its time per text (plumbing only: nothing here ranks) makes the model the bottleneck;
the sync runs as MCP sync_start runs it, and sync_status is polled like a client would.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from appliance.config import load_settings
from appliance.service import Appliance
from tests.fixtures.embedders import MODELS_DIR, HashEmbedder

FILES = 12
PARAGRAPHS = 30


def test_sync_status_counts_files_and_chunks_when_written_while_the_model_is_behind(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(FILES):
        (docs / f"note-{n:02d}.md").write_text(f"# Note {n}\n\n" + "".join(
            f"## Part {p}\n\nParagraph {p} of note {n} talks about item {n * 100 + p} at length, "
            f"with enough words to be a chunk of its own.\n\n" for p in range(PARAGRAPHS)), "utf-8")
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "db"),
                              "MODELS_DIR": str(MODELS_DIR), "CHUNK_TOKEN_BUDGET": "32"})
    app = Appliance(settings, embedder=HashEmbedder(per_text=0.005))  # ~200 passages a second
    job = app.sync_start()
    seen: list[dict[str, Any]] = []
    while True:
        record = app.sync_status(job.job_id).wire()
        if record["finishedAt"] is not None:
            break
        if record.get("progress") and record["progress"].get("phase") == "indexing":
            seen.append(record["progress"] | {"jobFilesDone": record["filesDone"]})
        time.sleep(0.05)
    assert record["phase"] == "succeeded", record
    total_chunks = record["counts"]["chunks"]
    assert record["counts"]["added"] == FILES and total_chunks >= FILES * PARAGRAPHS

    assert seen, "no progress was shown while the sync indexed"
    for p in seen:
        assert p["filesTotal"] == FILES and p["filesDone"] <= p["filesConverted"] <= FILES
        assert p["chunksWritten"] <= total_chunks
        if p["filesDone"] == FILES:  # every file counted done only once its chunks are all written
            assert p["chunksWritten"] == total_chunks, p
        if p["chunksTotalKnown"]:
            assert p["chunksTotal"] == total_chunks, p
    # Every file converted long before the model was done, and the figures kept moving meanwhile.
    behind = [p for p in seen if p["filesConverted"] == FILES and p["chunksWritten"] < total_chunks]
    assert len({p["chunksWritten"] for p in behind}) >= 2, seen[-3:]
    assert all(p["filesDone"] < FILES for p in behind)
    assert any(p["etaSeconds"] for p in behind), "no ETA while the model was behind"  # null only until two writes
    assert all(p["jobFilesDone"] <= p["filesConverted"] for p in seen)
