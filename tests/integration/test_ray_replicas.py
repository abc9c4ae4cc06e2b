"""Read replicas: 3 reader processes answer from one index while `sync --ray` writes into it.

Every answer must come from a committed version (each hit is a row of the chunks table at the
version the reader searched), every reader must see each commit within REPLICA_LAG_S (a search
checks out the latest version first, so the bound is one query plus the reader's pause), and
the readers never block the writer (the sync finishes, nothing failed).
"""
from __future__ import annotations

import multiprocessing as mp
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

ray = pytest.importorskip("ray", reason="Ray is not installed (the [cluster] extra): `make test-ray` installs it")

from appliance.cluster.driver import sync_on_ray  # noqa: E402
from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402
from appliance.sync import indexing  # noqa: E402
from tests.integration.test_ray_sync import FILES  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(900)]

READERS = 3
REPLICA_LAG_S = 15.0
"""Measured on 2 cores shared by the Ray workers, the three readers and the driver: see the README."""
QUERIES = ["table with a title", "equations in a document", "comments in a presentation", "the cover of a book"]


def _reader(docs: str, index: str, models: str, stop: Any, out: Any, name: int) -> None:
    app = Appliance(load_settings({"BASE_DIR": docs, "DB_PATH": index, "MODELS_DIR": models}))
    answers = []
    n = 0
    while not stop.is_set():
        query = QUERIES[n % len(QUERIES)]
        n += 1
        result = app.search(query, top_k=5)
        chunks = app.index.chunks()
        version = chunks.version if chunks is not None else 0
        answers.append((time.time(), version, [(h.source, h.chunk_index, h.text) for h in result.results]))
        time.sleep(0.3)
    out.put((name, answers))


def test_three_replicas_read_committed_versions_while_a_ray_sync_writes(shared: Path, models_dir: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    docs, index = tmp_path / "docs", tmp_path / "index"
    for n, name in enumerate(FILES):
        if n < 3:  # something to answer from before the readers start
            (docs / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(shared / "corpus" / name, docs / name)
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(index), "MODELS_DIR": str(models_dir)})
    writer = Appliance(settings)
    writer.sync()

    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    readers = [ctx.Process(target=_reader, args=(str(docs), str(index), str(models_dir), stop, out, i))
               for i in range(READERS)]
    for p in readers:
        p.start()
    commits: list[tuple[float, int]] = []
    store = indexing.write_works

    def timed_store(core: Any, works: Any, report: Any) -> None:
        store(core, works, report)
        chunks = core.index.chunks()
        commits.append((time.time(), chunks.version if chunks is not None else 0))

    monkeypatch.setattr(indexing, "write_works", timed_store)  # the driver commits through it
    try:
        time.sleep(8)  # the readers load the model and answer from the first version
        for name in FILES[3:]:
            (docs / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(shared / "corpus" / name, docs / name)
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
        try:
            report = sync_on_ray(writer.resources, "local")
        finally:
            ray.shutdown()
        time.sleep(REPLICA_LAG_S)  # every reader gets to see the last commit
    finally:
        stop.set()
        answers = dict(out.get(timeout=120) for _ in readers)
        for p in readers:
            p.join(60)
    assert report.failed == [] and report.added == len(FILES) - 3
    assert commits, "the sync committed nothing"

    table = writer.index.chunks()
    assert table is not None
    by_version: dict[int, dict[tuple[str, int], str]] = {}
    lags: list[float] = []
    for name, mine in answers.items():
        assert mine, f"reader {name} answered nothing"
        for _t, version, hits in mine:
            if version not in by_version:
                table.checkout(version)
                by_version[version] = {(r["source_id"], r["chunk_index"]): r["text"] for r in table.search()
                                       .select(["source_id", "chunk_index", "text"]).limit(None).to_list()}
            rows = by_version[version]
            for source, index, text in hits:
                assert rows.get((source, index)) == text, (name, version, source, index)
        for committed_at, version in commits:
            seen = [t for t, v, _h in mine if v >= version]
            assert seen, f"reader {name} never saw version {version}"
            lags.append(seen[0] - committed_at)
            assert lags[-1] <= REPLICA_LAG_S, (name, version, lags[-1])
    table.checkout_latest()
    answered = sum(len(mine) for mine in answers.values())
    print(f"\n{READERS} readers, {answered} answers from {len(by_version)} versions, {len(commits)} commits; "
          f"lag to see a commit: median {sorted(lags)[len(lags) // 2]:.2f} s, max {max(lags):.2f} s")
