"""An index in a bucket, end to end: a sync into s3://, a query through the MCP in-memory client, and a
second process (another host's state directory) reading the same bucket sees a new commit within seconds.

The S3 server is moto's, started on loopback by tests/fixtures/s3_server.py (real HTTP, SigV4, conditional puts).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.config import load_settings
from appliance.embed import OnnxEmbedder
from appliance.service import Appliance
from appliance.sync.stamp import STAMP_FILE
from tests.fixtures.mcp_calls import ok, serve
from tests.fixtures.s3_server import S3Server

pytestmark = [pytest.mark.slow, pytest.mark.model]

REPO = Path(__file__).resolve().parents[2]
SEEN_WITHIN_S = 15.0
"""A replica sees a commit at its next read after READ_CONSISTENCY_S; this bounds it on a loaded 2-core box."""

READER = """
import json, sys, time
from appliance.config import load_settings
from appliance.service import Appliance
from appliance.sync.stamp import STAMP_FILE
app = Appliance(load_settings(json.loads(sys.argv[1])))
print("ready", flush=True)
deadline = time.time() + 240
while time.time() < deadline:
    hits = app.search(sys.argv[2], top_k=3).results
    if any(sys.argv[2] in h.text for h in hits):
        print("seen", time.time(), flush=True)
        break
    time.sleep(0.2)
"""



def _app(env: dict[str, str], docs: Path, models_dir: Path, state: Path, embedder: OnnxEmbedder | None) -> Appliance:
    return Appliance(load_settings({**env, "BASE_DIR": str(docs), "MODELS_DIR": str(models_dir),
                                    "STATE_DIR": str(state)}), embedder=embedder)


def test_sync_into_a_bucket_query_over_mcp_and_a_second_host_sees_a_new_commit(
        s3: S3Server, tmp_path: Path, models_dir: Path, real_embedder: OnnxEmbedder) -> None:
    s3.create_bucket("minirag-e2e")
    env = s3.env("minirag-e2e", prefix="team/index")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "espresso.md").write_text("# Descaling\n\nRun citric acid through the espresso machine every month.\n")
    (docs / "bikes.md").write_text("# Chains\n\nOil the bicycle chain after riding in the rain.\n")
    writer = _app(env, docs, models_dir, tmp_path / "state-a", real_embedder)

    report = writer.sync()
    assert report.added == 2 and report.chunks >= 2
    keys = s3.keys("minirag-e2e", "team/index/")
    assert "team/index/identity.json" in keys
    assert any(k.startswith("team/index/chunks.lance/_versions/") for k in keys)
    assert not list((tmp_path / "state-a").glob("*.lance")), "the tables live in the bucket, not the state dir"
    assert writer.sync().added == 0  # nothing changed: a local index would leave the no-change stamp now
    assert not (tmp_path / "state-a" / STAMP_FILE).exists(), "another host may commit: no stamp for a bucket"

    server, _ = serve(tmp_path, real_embedder, **env, BASE_DIR=str(docs), STATE_DIR=str(tmp_path / "s-mcp"))
    found = ok(server, "query_documents", {"query": "how do I descale the coffee machine", "topK": 3})
    assert "espresso.md" in json.dumps(found["results"][0])
    status = ok(server, "status")
    assert status["index"]["dbPath"] == "s3://minirag-e2e/team/index"
    assert status["index"]["chunkCount"] == report.chunks

    marker = "zephyrquokka"
    child_env = {**env, "BASE_DIR": str(docs), "MODELS_DIR": str(models_dir), "STATE_DIR": str(tmp_path / "state-b")}
    reader = subprocess.Popen([sys.executable, "-c", READER, json.dumps(child_env), marker], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "ready"
        (docs / "note.md").write_text(f"# Pets\n\nThe {marker} sleeps in the greenhouse.\n")
        assert writer.sync().added == 1
        committed = time.time()
        line = reader.stdout.readline().split()
        assert line and line[0] == "seen", "the second process never saw the new commit"
        assert float(line[1]) - committed < SEEN_WITHIN_S
    finally:
        reader.kill()
        reader.wait()


def test_a_sync_in_rounds_writes_into_the_bucket_from_its_child_processes(
        s3: S3Server, tmp_path: Path, models_dir: Path, real_embedder: OnnxEmbedder) -> None:
    """The rounds' children open the bucket themselves while this process holds the writer lease."""
    s3.create_bucket("minirag-rounds")
    env = s3.env("minirag-rounds", prefix="idx") | {"SYNC_ROUND_FILES": "2"}
    docs = tmp_path / "docs"
    docs.mkdir()
    topics = ["descaling an espresso machine", "oiling a bicycle chain", "pruning apple trees",
              "bleeding a radiator", "sharpening a kitchen knife"]
    for n, topic in enumerate(topics):
        (docs / f"how-{n}.md").write_text(f"# How to\n\nA short guide to {topic}, step by step.\n")
    app = _app(env, docs, models_dir, tmp_path / "state", real_embedder)
    report = app.sync()
    assert report.ok and report.added == len(topics), report.to_dict()
    assert not list((tmp_path / "state").glob("*.lance")), "the rounds wrote to local disk, not the bucket"
    reader = _app(env, docs, models_dir, tmp_path / "state-r", real_embedder)
    assert reader.index.registry.count_chunks() == report.chunks
    assert reader.search("how do I bleed a radiator", top_k=1).results[0].source.endswith("how-3.md")


def test_a_bucket_index_after_deletes_and_shrinks_equals_a_local_index_of_the_same_folder(
        s3: S3Server, tmp_path: Path, models_dir: Path, real_embedder: OnnxEmbedder) -> None:
    """In a bucket a delete is a merge that deletes (bound by the deadline, Tables.delete_rows) and a count of
    rows is a query: a removed file, a shrunk one and one emptied leave what a disk index of the folder holds."""
    s3.create_bucket("minirag-edits")
    env = s3.env("minirag-edits", prefix="idx")
    docs = tmp_path / "docs"
    docs.mkdir()
    long = "".join(f"## Step {n}\n\nTurn valve {n} a quarter turn and wait {n} minutes before the next one.\n\n"
                   for n in range(40))
    (docs / "manual.md").write_text(f"# Manual\n\n{long}")
    (docs / "gone.md").write_text("# Gone\n\nThis note is deleted before the second sync.\n")
    (docs / "emptied.md").write_text("# Emptied\n\nThis note loses all its text.\n")
    (docs / "kept.md").write_text("# Kept\n\nThis note stays as it is.\n")
    bucket = _app(env, docs, models_dir, tmp_path / "state", real_embedder)
    assert bucket.sync().added == 4
    before = bucket.index.registry.chunk_counts()

    (docs / "gone.md").unlink()
    (docs / "manual.md").write_text("# Manual\n\n## Step 0\n\nTurn valve 0 a quarter turn.\n")
    (docs / "emptied.md").write_text("")
    report = bucket.sync()
    assert report.ok and report.deleted == 1, report.to_dict()

    local = _app({"DB_PATH": str(tmp_path / "local")}, docs, models_dir, tmp_path / "local-state", real_embedder)
    assert local.sync().ok
    after = bucket.index.registry.chunk_counts()
    assert after == local.index.registry.chunk_counts()
    assert len(after) < len(before) and sum(after.values()) < sum(before.values())
    assert bucket.index.registry.count_chunks_not_cut_by("no-such-scheme") == sum(after.values())
    health = bucket.status().index
    assert health is not None and health.consistency_warning is None
