"""Readers of an open index never queue behind a writer (a sync inside the server builds indexes for seconds)."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa

from appliance.config import replica_budget
from appliance.storage.index import Index
from appliance.storage.tables import chunk_schema


def test_reads_answer_while_a_writer_holds_the_index_lock(tmp_path: Path) -> None:
    dim = 8
    index = Index(tmp_path, dim, memory_budget=replica_budget())
    row = {f.name: None for f in chunk_schema(dim)} | {
        "id": "k:0", "source_id": "/docs/a.md", "chunk_index": 0, "text": "turbine blades", "keywords": "turbin blade",
        "vector": (np.ones(dim, dtype="float32") / np.sqrt(dim)).tolist()}
    index.chunks(create=True).add(pa.Table.from_pylist([row], schema=chunk_schema(dim)))

    holding, release = threading.Event(), threading.Event()

    def writer() -> None:  # stands in for replace_sources / refresh_indexes mid-write
        with index.lock:
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    holding.wait(5)
    answers: list[object] = []
    reader = threading.Thread(target=lambda: answers.append(
        index.reader.vector_search(row["vector"], 5, None, ["id"])))
    reader.start()
    reader.join(10)
    finished_while_held = not reader.is_alive()
    release.set()
    thread.join()
    reader.join()
    assert finished_while_held, "a read waited for the writer's lock"
    assert [r["id"] for r in answers[0]] == ["k:0"]  # type: ignore[index]
