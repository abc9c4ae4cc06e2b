"""A long sync in rounds, each in a child process (appliance/sync/rounds.py): the same index as one process,
readers answering while the rounds write, a round whose process dies reported by file and the rest indexed."""
from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.embed import OnnxEmbedder
from appliance.ingest.discover import FoundFile
from appliance.ingest.snapshots import Member
from appliance.service import Appliance
from appliance.sync.rounds import ROUND_DIED, RoundsIndexer, _Sender, split
from scripts.faults_crash import generated_text

FILES = 36
ROUND = 10
"""Four rounds (10, 10, 10, 6 files)."""


def _corpus(docs: Path, doomed: int | None = None) -> None:
    rng = random.Random(5)
    docs.mkdir(parents=True, exist_ok=True)
    for i in range(FILES):
        text = generated_text(rng, i, 2)
        (docs / f"doc{i:03d}.md").write_text(text + ("\n\ndoomed\n" if i == doomed else ""), "utf-8")


def _index(app: Appliance) -> dict[str, tuple[str, str, np.ndarray]]:
    rows = app.index.tables.chunks().search().limit(None).to_list()  # type: ignore[union-attr]
    return {r["id"]: (r["source_id"], r["text"], np.asarray(r["vector"])) for r in rows}


class DyingEmbedder(OnnxEmbedder):
    """The real model, except that the process ends (as an out-of-memory kill would end it) when it is
    asked to embed a text that says "doomed"."""

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if any("doomed" in t for t in texts):
            os._exit(9)
        return super().embed_passages(texts)


def test_split_keeps_order_and_snapshot_sequences_whole() -> None:
    root = Path("/r")
    todo = [(FoundFile(root / f"f{i:02d}", root, 1, 1), f"h{i}") for i in range(12)]
    members = {root / f"f{i:02d}": Member("g", f"2024-01-{i:02d}") for i in (3, 4, 5, 6)}
    rounds = split(todo, members, 3)
    assert [item for r in rounds for item in r] == todo  # every file once, in order
    assert [len(r) for r in rounds] == [3, 4, 3, 2] and sum(len(r) for r in rounds) == 12
    holding = [n for n, r in enumerate(rounds) if any(f.path in members for f, _ in r)]
    assert len(holding) == 1  # the sequence's four files are in one round


def test_a_round_reports_from_two_threads_without_mixing_its_messages() -> None:
    """The child's writer thread and main thread both report over one pipe (a sync of 30,000 files failed
    with `invalid load key` when two sends interleaved)."""
    import multiprocessing as mp

    ours, theirs = mp.get_context("spawn").Pipe(duplex=False)
    sender = _Sender(theirs)
    got: list[tuple[str, int, bytes]] = []
    reader = threading.Thread(target=lambda: got.extend(ours.recv() for _ in range(400)))
    reader.start()
    writers = [threading.Thread(target=lambda n=n: [sender.send((f"t{n}", i, bytes([n]) * 70_000)) for i in range(100)])
               for n in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    reader.join(timeout=60)
    assert len(got) == 400
    for name, _i, blob in got:
        assert blob == bytes([int(name[1:])]) * 70_000
    assert sorted((name, i) for name, i, _ in got) == sorted((f"t{n}", i) for n in range(4) for i in range(100))


@pytest.mark.slow
@pytest.mark.model
def test_rounds_give_the_index_of_one_process_while_another_reads(tmp_path: Path, models_dir: Path,
                                                                  real_embedder: OnnxEmbedder,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import app_factory

    events: list[str] = []  # each round's process started, each round's outcome received: in order
    start, follow = RoundsIndexer._start, RoundsIndexer._follow

    def starting(self: RoundsIndexer, job: Any, name: str) -> Any:
        events.append(f"start {name}")
        return start(self, job, name)

    def following(self: RoundsIndexer, job: Any, name: str, *rest: Any) -> Any:
        ahead = follow(self, job, name, *rest)
        events.append(f"ended {name}")
        return ahead

    monkeypatch.setattr(RoundsIndexer, "_start", starting)
    monkeypatch.setattr(RoundsIndexer, "_follow", following)

    docs = tmp_path / "docs"
    _corpus(docs)
    one = app_factory(tmp_path / "one", models_dir, real_embedder)(docs, SYNC_ROUND_FILES="0")
    single = one.sync()
    assert single.ok and single.added == FILES
    build: Callable[..., Appliance] = app_factory(tmp_path / "rounds", models_dir, real_embedder)
    app = build(docs, SYNC_ROUND_FILES=str(ROUND))
    reader = build(docs, SYNC_ROUND_FILES=str(ROUND))  # the rounds write from child processes: another process
    counts: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                if reader.index.exists():
                    reader.index.checkout_latest()
                    counts.append(reader.index.registry.count_chunks())
                    reader.search("generated text about a document")
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
            done.wait(0.05)

    thread = threading.Thread(target=read)
    thread.start()
    seen: list[tuple[str, int, int]] = []
    try:
        report = app.sync(progress=lambda phase, n, total, _path: seen.append((phase, n, total)))
    finally:
        done.set()
        thread.join()
    assert not errors, errors[:3]
    assert report.ok and report.added == FILES and report.chunks == single.chunks, report.to_dict()
    # each round after the first started while the one before wrote its last files (once they were embedded)
    assert events == ["start round 1 of 4", "start round 2 of 4", "ended round 1 of 4", "start round 3 of 4",
                      "ended round 2 of 4", "start round 4 of 4", "ended round 3 of 4", "ended round 4 of 4"]
    assert counts == sorted(counts) and len(set(counts)) > 2  # the reader saw the rounds' writes land one by one
    indexing = [n for phase, n, total in seen if phase == "indexing" and total == FILES]
    assert indexing and indexing == sorted(indexing) and indexing[-1] == FILES
    mine, theirs = _index(app), _index(one)
    assert mine.keys() == theirs.keys()
    for key, (source, text, vector) in mine.items():
        assert (source, text) == theirs[key][:2]
        # the same text, embedded in other batches: the quantized model scales its activations per batch
        assert float(vector @ theirs[key][2]) > 0.99
    again = build(docs, SYNC_ROUND_FILES=str(ROUND)).sync()
    assert again.unchanged == FILES and again.added == again.updated == 0


@pytest.mark.slow
@pytest.mark.model
def test_a_round_whose_process_dies_is_reported_by_file_and_the_next_rounds_go_on(
        tmp_path: Path, models_dir: Path, real_embedder: OnnxEmbedder) -> None:
    from tests.conftest import app_factory

    docs = tmp_path / "docs"
    _corpus(docs, doomed=14)  # in the second round
    dying = DyingEmbedder(real_embedder.spec, models_dir)
    report = app_factory(tmp_path, models_dir, dying)(docs, SYNC_ROUND_FILES=str(ROUND)).sync()
    died = [p for p in report.failed if p.code == ROUND_DIED]
    assert died and {Path(p.path).name for p in died} <= {f"doc{i:03d}.md" for i in range(10, 20)}
    assert "doc014.md" in {Path(p.path).name for p in died}
    assert all("round 2 of 4" in p.reason and "exit code 9" in p.reason for p in died)
    assert report.added == FILES - len(died)  # rounds 1, 3 and 4 indexed everything
    app = app_factory(tmp_path, models_dir, real_embedder)(docs, SYNC_ROUND_FILES=str(ROUND))
    assert len(app.index.registry.file_sources()) == FILES - len(died)
    healed = app.sync()
    assert healed.ok and healed.added == len(died) and not healed.failed, healed.to_dict()
    assert len(app.index.registry.file_sources()) == FILES



@pytest.mark.slow
@pytest.mark.model
def test_minirag_sync_in_rounds_converts_files_that_need_a_parser(tmp_path: Path, models_dir: Path) -> None:
    """The CLI's sync in rounds over files a conversion worker parses (HTML here): each round's process
    starts its own workers. A round process that could not (a daemonic one may not start processes) left
    every file after the first waiting for a worker, and the sync hung."""
    import json
    import subprocess
    import sys

    docs = tmp_path / "docs"
    _corpus(docs)
    for i in range(0, FILES, 4):
        (docs / f"page{i:03d}.html").write_text(
            f"<html><body><h1>Page {i}</h1><p>The pump number {i} was serviced.</p></body></html>\n")
    total = len(list(docs.iterdir()))
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, BASE_DIR=str(docs), DB_PATH=str(tmp_path / "index"), MODELS_DIR=str(models_dir),
               SYNC_ROUND_FILES=str(ROUND), PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-m", "appliance", "sync", "--json"], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["added"] == total and not report["failed"], report
    hits = subprocess.run([sys.executable, "-m", "appliance", "query", "pump number 8 serviced", "--json"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert hits.returncode == 0, hits.stderr[-2000:]
    assert any(Path(hit["filePath"]).name.startswith("page") for hit in json.loads(hits.stdout)["results"])


CANCEL_IN_ROUNDS = """
import json, os, sys, time
from pathlib import Path
from appliance.config import load_settings
from appliance.service import Appliance
from scripts.faults_crash import descendants
docs, db, models = sys.argv[1:4]
app = Appliance(load_settings({"BASE_DIR": docs, "DB_PATH": db, "MODELS_DIR": models, "SYNC_ROUND_FILES": "10"}))
job = app.sync_start()
deadline = time.monotonic() + 600
while app.sync_status(job.job_id).files_done < 12 and time.monotonic() < deadline:  # in round 2, at the slow file
    time.sleep(0.2)
family = descendants(os.getpid())
started = time.monotonic()
app.cancel_job(job.job_id)
while app.sync_status(job.job_id).finished_at is None and time.monotonic() - started < 60:
    time.sleep(0.05)
elapsed = time.monotonic() - started
time.sleep(1.0)
left = [p for p in family if Path(f"/proc/{p}").exists() and "forkserver" not in Path(f"/proc/{p}/cmdline").read_text()
        and "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_text()]
for slow in Path(docs).glob("*slow*"):
    slow.unlink()  # it would take an hour again
again = app.sync()
print(json.dumps({"phase": app.sync_status(job.job_id).phase, "elapsed": elapsed, "left": left,
                  "family": len(family), "again": again.added, "failed": len(again.failed)}))
"""


@pytest.mark.slow
@pytest.mark.model
def test_cancelling_a_sync_job_in_rounds_stops_its_round_process_and_the_next_sync_completes(
        tmp_path: Path, models_dir: Path, slow_conversions: dict[str, str]) -> None:
    """sync_cancel (the service's cancel_job) on a sync in rounds: the round's process and its conversion
    worker (stuck on a slow file in round 2) end within seconds, the job ends "cancelled", and the next sync
    indexes what the cancelled one left."""
    import json
    import subprocess
    import sys

    docs = tmp_path / "docs"
    _corpus(docs)
    (docs / "doc012-slow.html").write_text("<p>converting this takes an hour with the slow_conversions fixture</p>\n")
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", CANCEL_IN_ROUNDS, str(docs), str(tmp_path / "index"), str(models_dir)],
                         cwd=root, env=slow_conversions, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    print(out)
    assert out["phase"] == "cancelled" and out["elapsed"] < 10 and not out["left"], out
    assert out["family"] >= 2  # the round's process and its worker were there to stop
    assert out["failed"] == 0 and 0 < out["again"] <= FILES - 10  # round 1's files were written before


def test_the_fork_server_parses_the_tokenizer_once_for_every_round(real_embedder: OnnxEmbedder) -> None:
    """Each round's process used to parse the model's tokenizer (~1 s) before cutting its first file; the fork
    server it is forked from now parses it as it imports the rounds module, named by TOKENIZER_PRELOAD."""
    import subprocess
    import sys

    from appliance.embed import tokenizer_at
    from appliance.sync import rounds

    path = real_embedder.tokenizer_file()
    assert tokenizer_at(path) is tokenizer_at(path)  # parsed once per process
    probe = ("import appliance.embed as e, appliance.sync.rounds; "
             "print(sorted(str(k[0]) for k in e._TOKENIZERS))")  # what the server holds once it imported rounds
    env = {**os.environ, rounds.TOKENIZER_PRELOAD: str(path)}
    loaded = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == repr([str(path)])
    env.pop(rounds.TOKENIZER_PRELOAD)
    unset = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert unset.stdout.strip() == "[]"  # any other process that imports rounds parses nothing at import

    with rounds._fork_server_environment(real_embedder):  # while a round's process (and the server) starts
        assert os.environ[rounds.TOKENIZER_PRELOAD] == str(path)
    assert rounds.TOKENIZER_PRELOAD not in os.environ  # no other process started from here parses it
