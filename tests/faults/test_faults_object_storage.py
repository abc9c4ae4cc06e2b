"""Faults of an index in a bucket (DB_PATH=s3://...), against moto's S3 server on loopback: a bucket that does
not exist, wrong credentials, an endpoint that stops answering mid-sync, a bucket over its quota mid-sync (moto
behind a guard that answers writes as Ceph RGW does: tests/fixtures/s3_quota.py), a second writer on another
host. Every CLI output is checked for the credentials.
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
from appliance.errors import StorageUnreachable
from appliance.service import Appliance
from tests.fixtures.chunks import write_passages
from tests.fixtures.embedders import HashEmbedder
from tests.fixtures.s3_server import S3Server, start_s3_server

pytestmark = [pytest.mark.faults, pytest.mark.model]

REPO = Path(__file__).resolve().parents[2]
MINIRAG = [sys.executable, "-c", "from appliance.adapters.cli import main; main()"]



def _env(s3: S3Server, bucket: str, tmp_path: Path, models_dir: Path, state: str = "state",
         **extra: str) -> dict[str, str]:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    return {**s3.env(bucket), "BASE_DIR": str(docs), "MODELS_DIR": str(models_dir),
            "STATE_DIR": str(tmp_path / state), **extra}


def _cli(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MINIRAG, *args], env={**os.environ, "PYTHONPATH": str(REPO), **env}, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def _no_secret(s3: S3Server, *outputs: str) -> None:
    for text in outputs:
        assert s3.secret_key not in text
        assert s3.access_key not in text
        assert "WRONG-SECRET-0123" not in text


def _docs(tmp_path: Path, count: int) -> None:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    for i in range(count):
        (docs / f"note{i:03}.md").write_text(f"# Note {i}\n\nThe valve number {i} is checked on day {i}.\n" * 3)


def _sync_until_it_committed(s3: S3Server, bucket: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """`minirag sync` in a process of its own, returned once it committed files of its own to the bucket."""
    sync = subprocess.Popen([*MINIRAG, "sync"], env={**os.environ, "PYTHONPATH": str(REPO), **env}, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def commits() -> int:
        return sum("/_versions/" in key for key in s3.keys(bucket, "index/"))

    before = commits()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and sync.poll() is None and commits() < before + 3:
        time.sleep(0.2)
    assert sync.poll() is None, "the sync ended before the fault began"
    return sync


def _chunks_per_document(env: dict[str, str], tmp_path: Path) -> dict[str, int]:
    """What a reader in another state directory finds in the chunks table: chunks per document."""
    return Appliance(load_settings({**env, "STATE_DIR": str(tmp_path / "reader")})).index.registry.chunk_counts()


def _first_sync(env: dict[str, str], tmp_path: Path) -> set[int]:
    """Sync the first notes; the number of chunks every note cuts into (all alike)."""
    first = _cli(["sync"], env)
    assert first.returncode == 0, first.stderr
    whole = set(_chunks_per_document(env, tmp_path).values())
    assert len(whole) == 1, "every note cuts into as many chunks"
    return whole


def _whole_documents_served(env: dict[str, str], tmp_path: Path, whole: set[int], at_least: int) -> None:
    """After a sync the store failed mid-write: every document a reader finds has all its chunks (each one's
    chunks go in one commit). Its sources row, written after that commit, may be missing (status says so):
    the store can fail between the two, and a commit the client gave up on can still land once the server
    answers again. The next sync records it."""
    served = _chunks_per_document(env, tmp_path)
    assert len(served) >= at_least and set(served.values()) == whole


def _converged(env: dict[str, str], tmp_path: Path, whole: set[int], files: int) -> None:
    """After the sync that follows: every file recorded, with all its chunks, and nothing for status to name."""
    health = Appliance(load_settings({**env, "STATE_DIR": str(tmp_path / "reader")})).status().index
    assert health is not None and health.consistency_warning is None and health.source_count == files
    _whole_documents_served(env, tmp_path, whole, at_least=files)


def test_a_bucket_over_its_quota_mid_sync_fails_it_as_full_and_the_next_sync_completes(
        tmp_path: Path, models_dir: Path) -> None:
    flag = tmp_path / "quota-reached"
    s3 = start_s3_server(quota_flag=flag)
    try:
        s3.create_bucket("minirag-quota")
        _docs(tmp_path, 4)
        env = _env(s3, "minirag-quota", tmp_path, models_dir)
        whole = _first_sync(env, tmp_path)
        _docs(tmp_path, 60)
        sync = _sync_until_it_committed(s3, "minirag-quota", env)
        flag.touch()
        out, err = sync.communicate(timeout=300)
        assert sync.returncode != 0
        assert "is full (QuotaExceeded)" in err and "Raise the bucket's quota" in err, err[-2000:]
        assert "cannot release the writer lease" not in err, "a delete is allowed over a quota"
        assert "s3://minirag-quota/index" in out + err
        _no_secret(s3, out, err)
        _whole_documents_served(env, tmp_path, whole, at_least=4)
        flag.unlink()  # the operator raised the quota
        again = _cli(["sync"], env)
        assert again.returncode == 0, again.stderr
        _converged(env, tmp_path, whole, 60)
    finally:
        s3.stop()


def test_a_bucket_that_does_not_exist_is_named_without_credentials(
        s3: S3Server, tmp_path: Path, models_dir: Path) -> None:
    _docs(tmp_path, 1)
    env = _env(s3, "no-such-minirag-bucket", tmp_path, models_dir)
    run = _cli(["sync"], env)
    assert run.returncode != 0
    assert "no-such-minirag-bucket" in run.stderr + run.stdout and "does not exist" in run.stderr + run.stdout
    status = _cli(["status", "--json"], env)
    _no_secret(s3, run.stdout, run.stderr, status.stdout, status.stderr)


def test_wrong_credentials_are_refused_by_name_and_never_printed(
        s3: S3Server, tmp_path: Path, models_dir: Path) -> None:
    s3.create_bucket("minirag-creds")
    _docs(tmp_path, 1)
    env = _env(s3, "minirag-creds", tmp_path, models_dir, AWS_SECRET_ACCESS_KEY="WRONG-SECRET-0123")
    run = _cli(["sync"], env)
    assert run.returncode != 0
    text = run.stderr + run.stdout
    assert "refused the credentials" in text and "s3://minirag-creds/index" in text
    status = _cli(["status", "--json"], env)
    _no_secret(s3, run.stdout, run.stderr, status.stdout, status.stderr)

    good = _env(s3, "minirag-creds", tmp_path, models_dir)
    synced, status = _cli(["sync"], good), _cli(["status", "--json"], good)
    assert synced.returncode == 0, synced.stderr
    _no_secret(s3, synced.stdout, synced.stderr, status.stdout, status.stderr)
    assert json.loads(status.stdout)["config"]["dbPath"] == "s3://minirag-creds/index"


def test_an_endpoint_that_stops_answering_fails_the_sync_and_the_next_one_completes(
        s3: S3Server, tmp_path: Path, models_dir: Path) -> None:
    s3.create_bucket("minirag-freeze")
    _docs(tmp_path, 4)
    # a short request timeout: with the default 30 s (retried twice) the frozen endpoint took ~3 minutes to fail
    env = _env(s3, "minirag-freeze", tmp_path, models_dir, S3_TIMEOUT="10")
    whole = _first_sync(env, tmp_path)
    _docs(tmp_path, 60)
    sync = _sync_until_it_committed(s3, "minirag-freeze", env)
    s3.freeze()
    try:
        out, err = sync.communicate(timeout=300)
    finally:
        s3.thaw()
    assert sync.returncode != 0
    assert "did not answer" in out + err and "s3://minirag-freeze/index" in out + err
    _no_secret(s3, out, err)

    _whole_documents_served(env, tmp_path, whole, at_least=4)

    again = _cli(["sync"], env)
    assert again.returncode == 0, again.stderr
    _converged(env, tmp_path, whole, 60)


HOLDER = """
import json, sys, time
from appliance.config import load_settings
from appliance.storage.bucket import writer_lease
settings = load_settings(json.loads(sys.argv[1]))
with writer_lease(settings.bucket, sys.argv[2]):
    print("holding", flush=True)
    time.sleep(120)
"""


def test_a_second_writer_on_another_host_is_refused(s3: S3Server, tmp_path: Path, models_dir: Path) -> None:
    s3.create_bucket("minirag-lease")
    _docs(tmp_path, 2)
    other = _env(s3, "minirag-lease", tmp_path, models_dir, state="other-host")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps(other), "/srv/other-host/state"], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        run = _cli(["sync"], _env(s3, "minirag-lease", tmp_path, models_dir))
        assert run.returncode != 0
        text = run.stdout + run.stderr
        assert "Another sync is writing the index at s3://minirag-lease/index" in text and f"pid {holder.pid}" in text
        _no_secret(s3, run.stdout, run.stderr)
    finally:
        holder.kill()
        holder.wait()


DEADLINE_SLACK_S = 10.0
"""What a failed read may take past its deadline: the error's way back, on a loaded 2-core box."""


def test_each_read_and_delete_of_a_frozen_bucket_fails_by_name_within_its_deadline(
        s3: S3Server, tmp_path: Path, models_dir: Path) -> None:
    """LanceDB retries each data file's reads in turn, so a read of a frozen endpoint took ~8 S3_TIMEOUTs a
    fragment to fail (a sync outlived CI's 300 s); Tables.deadline bounds every query, merge and delete instead,
    and the look for newer versions before each (LanceDB's own, a LIST, took ~14 S3_TIMEOUTs to fail whatever
    the deadline: 27 s here)."""
    s3.create_bucket("minirag-deadline")
    env = _env(s3, "minirag-deadline", tmp_path, models_dir, S3_TIMEOUT="2")
    embedder = HashEmbedder()  # plumbing: nothing here ranks
    index = Appliance(load_settings(env), embedder=embedder).index
    for n in range(16):  # sixteen commits below the fold's threshold: as many fragments for a read to go through
        write_passages(index, embedder, f"note-{n}", [f"valve {n} is checked on day {n}", f"pump {n} is oiled"])
    deadline = index.deadline
    assert deadline is not None and deadline.total_seconds() == 8
    operations = {  # a sync's lookup of stored vectors (where CI's sync hung), a search, and the two new paths
        "stored vectors": lambda: index.reader.vectors_by_key(["valve 3"], embedder.spec.id, "any"),
        "a keyword search": lambda: index.reader.keyword_search("valve pump", 5, None, ["id", "text"]),
        "a count with a filter": lambda: index.registry.count_chunks_of("note-3"),
        "a delete": lambda: index.writes.delete_sources(["note-5"]),
    }
    s3.freeze()
    try:
        for name, operation in operations.items():
            started = time.monotonic()
            with pytest.raises(StorageUnreachable, match="did not answer"):
                operation()
            took = time.monotonic() - started
            assert took < deadline.total_seconds() + DEADLINE_SLACK_S, f"{name} took {took:.1f} s"
    finally:
        s3.thaw()
    assert index.registry.count_chunks() == 32, "what was committed before the freeze is all there"
