"""`sync --ray`: a local Ray cluster (2 CPUs, started here) indexes a mixed subset of ../shared/corpus
and the index equals a local sync's; an unreachable cluster is a named error with nothing written;
a node with another model is refused; a Ray worker killed mid-run loses nothing.

Run with `make test-ray` (needs the [cluster] extra: Ray). Without Ray every test here is skipped.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT

ray = pytest.importorskip("ray", reason="Ray is not installed (the [cluster] extra): `make test-ray` installs it")

from appliance.cluster import NodeMismatch  # noqa: E402
from appliance.cluster.driver import check_nodes, sync_on_ray  # noqa: E402
from appliance.cluster.node import Fingerprint, check_node  # noqa: E402
from appliance.config import load_settings  # noqa: E402
from appliance.service import Appliance  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.model, pytest.mark.timeout(900)]

FILES = [  # 12 files, 10 formats, 100-odd chunks
    "docling/docx/groundtruth/equations.docx.md",
    "docling/docx/sources/Strict.docx",
    "docling/html/sources/example_08.html",
    "docling/pdf/bookmark_sample.pdf",
    "docling/pptx/sources/powerpoint_comments.pptx",
    "docling/xlsx/sources/xlsx_05_table_with_title.xlsx",
    "kreuzberg/test_documents/epub/epub2_cover.epub",
    "markitdown/test.docx",
    "ocrmypdf/linn.txt",
    "textract/csv/raw_text.csv",
    "unstructured/simple.json",
    "markitdown/test.pptx",
]
SOURCE_FIELDS = ("source_id", "content_hash", "size", "mtime_ns", "title", "chunk_count", "scheme", "model_id",
                 "doc_class", "error_code")


@pytest.fixture(scope="module")
def docs(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ray") / "docs"
    for name in FILES:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(shared / "corpus" / name, target)
    return root


@pytest.fixture(scope="module")
def cluster() -> Any:
    """A local Ray cluster of 2 CPUs whose workers import this checkout; shut down after the module."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        yield ray
    finally:
        ray.shutdown()


def _app(docs: Path, index: Path, models_dir: Path, embedder: Any = None) -> Appliance:
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(index), "MODELS_DIR": str(models_dir)})
    return Appliance(settings, embedder=embedder)


def _contents(app: Appliance) -> tuple[dict[str, tuple[Any, ...]], dict[str, dict[str, Any]]]:
    sources = {s.source_id: tuple(getattr(s, f) for f in SOURCE_FIELDS) for s in app.index.registry.source_rows()}
    chunks = {r["id"]: r for r in app.index.reader.chunk_rows("source_id IS NOT NULL", ["id", "source_id", "text",
                                                                                  "embed_key", "vector"])}
    return sources, chunks


@pytest.fixture(scope="module")
def local(docs: Path, models_dir: Path, real_embedder: Any,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, tuple[Any, ...]], dict[str, dict[str, Any]]]:
    """A local sync of the same files, each document embedded in a model call of its own.

    A default local sync hands the model whatever chunks wait when it is free (up to 128, from
    several files), and the int8 model's vectors move by up to ~0.02 with their batch neighbours
    (reuse.py); a Ray task embeds each document alone, so this is the local sync it equals.
    """
    import appliance.sync.indexing as indexing

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(indexing, "EMBED_BATCH_CHUNKS", 1)  # the pipeline's batch: one document at a time
        app = _app(docs, tmp_path_factory.mktemp("local") / "index", models_dir, real_embedder)
        report = app.sync()
    assert report.failed == [] and report.added == len(FILES)
    return _contents(app)


def _assert_same(ours: tuple[dict[str, Any], dict[str, Any]], theirs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    (our_sources, our_chunks), (their_sources, their_chunks) = ours, theirs
    assert our_sources.keys() == their_sources.keys()
    for sid, row in our_sources.items():
        assert row == their_sources[sid], sid
    assert our_chunks.keys() == their_chunks.keys()
    for cid, row in our_chunks.items():
        assert (row["source_id"], row["text"], row["embed_key"]) == (
            their_chunks[cid]["source_id"], their_chunks[cid]["text"], their_chunks[cid]["embed_key"]), cid
        np.testing.assert_allclose(np.asarray(row["vector"], np.float32),
                                   np.asarray(their_chunks[cid]["vector"], np.float32), atol=1e-5, err_msg=cid)


def test_ray_sync_equals_a_local_sync(cluster: Any, docs: Path, models_dir: Path, local: Any,
                                      tmp_path: Path) -> None:
    app = _app(docs, tmp_path / "index", models_dir)
    indexers: list[Any] = []
    report = sync_on_ray(app.resources, "local", indexer_out=indexers)
    assert report.failed == [] and report.added == len(FILES) and report.chunks_embedded == report.chunks > 50
    assert indexers[0].writes >= 1 and {n.package for n in indexers[0].nodes} == {str(ROOT / "appliance")}
    _assert_same(_contents(app), local)

    again = sync_on_ray(app.resources, "local")  # nothing changed: no task, no write
    assert (again.unchanged, again.added, again.updated, again.chunks) == (len(FILES), 0, 0, 0)

    edited = docs / "ocrmypdf" / "linn.txt"  # one paragraph more: its other chunks keep their vectors
    original = edited.read_text(encoding="utf-8")
    try:
        edited.write_text(original + "\n\nA closing paragraph about Ray clusters and one writer.\n", encoding="utf-8")
        changed = sync_on_ray(app.resources, "local")
        assert changed.updated == 1 and changed.chunks_reused >= 1 and changed.chunks_embedded >= 1, changed.to_dict()
    finally:
        shutil.copy2(Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared")) / "corpus" / "ocrmypdf" /
                     "linn.txt", edited)


def test_a_node_with_another_model_is_refused(cluster: Any, models_dir: Path, tmp_path: Path) -> None:
    app = _app(tmp_path, tmp_path / "index", models_dir)
    good = Fingerprint.of(app.spec)
    other = replace(good, files=tuple((name, "0" * 64 if name == "model.onnx" else digest)
                                      for name, digest in good.files))
    with pytest.raises(NodeMismatch, match=r"model\.onnx"):
        check_node(other)  # in this process
    with pytest.raises(NodeMismatch, match="is refused") as caught:
        check_nodes(cluster, other)  # on the cluster's worker: the error crosses Ray, named
    assert caught.value.code == "cluster_node_mismatch"
    assert check_nodes(cluster, good)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_unreachable_cluster_is_a_named_error_and_nothing_is_written(how: str, docs: Path, models_dir: Path,
                                                                        tmp_path: Path) -> None:
    address = f"127.0.0.1:{_free_port()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "index"),
           "MODELS_DIR": str(models_dir)}
    args = [sys.executable, "-m", "appliance", "sync", "--json"]
    if how == "flag":
        args += ["--ray", address]
    else:
        env["RAY_ADDRESS"] = address
    started = time.monotonic()
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "cluster_unreachable" and address in error["message"], error
    assert time.monotonic() - started < 60
    assert not (tmp_path / "index").exists() or not any((tmp_path / "index").glob("*.lance"))


def _task_workers() -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    return [int(line.split(None, 1)[0]) for line in out.splitlines() if "ray::index_unit" in line]


def test_a_killed_worker_loses_nothing(cluster: Any, docs: Path, models_dir: Path, local: Any,
                                       tmp_path: Path) -> None:
    app = _app(docs, tmp_path / "index", models_dir)
    reports: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            reports.append(sync_on_ray(app.resources, "local"))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        workers = _task_workers()
        if workers:
            time.sleep(1.0)  # into its work: its model loaded, a file converting or embedding
            for pid in _task_workers():
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.2)
    thread.join(600)
    assert killed is not None, "no Ray task worker was seen to kill"
    assert not errors, errors
    report = reports[0]
    lost = [f for f in report.failed if f.code == "cluster_task_lost"]
    assert [f for f in report.failed if f.code != "cluster_task_lost"] == []
    if lost:  # Ray gave up on the task: the next sync indexes those files
        again = sync_on_ray(app.resources, "local")
        assert again.failed == [] and again.added == len(lost)
    _assert_same(_contents(app), local)


def test_ray_sync_into_a_bucket_equals_a_local_sync(cluster: Any, docs: Path, models_dir: Path, local: Any,
                                                    s3: Any, tmp_path: Path) -> None:
    """The driver, the one writer, commits what the Ray tasks made into an index in a bucket (an S3 server on
    loopback): the tables are in the bucket, nothing on local disk, and another host's process reads the same."""
    s3.create_bucket("minirag-ray")
    env = s3.env("minirag-ray", prefix="team/index")

    def in_bucket(state: str) -> Appliance:
        return Appliance(load_settings({**env, "BASE_DIR": str(docs), "MODELS_DIR": str(models_dir),
                                        "STATE_DIR": str(tmp_path / state)}))

    app = in_bucket("driver")
    report = sync_on_ray(app.resources, "local")
    assert report.failed == [] and report.added == len(FILES), report.to_dict()
    assert any(k.startswith("team/index/chunks.lance/_versions/") for k in s3.keys("minirag-ray", "team/index/"))
    assert not list((tmp_path / "driver").rglob("*.lance")), "the tables went to local disk, not the bucket"
    _assert_same(_contents(in_bucket("other-host")), local)
    again = sync_on_ray(app.resources, "local")  # nothing changed: no task, no write
    assert (again.unchanged, again.added, again.chunks) == (len(FILES), 0, 0)
