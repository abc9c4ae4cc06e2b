"""A requested stop (SIGTERM, the client leaving) ends a sync's pipeline and conversions at once,
and a scheduler.json left by a dead scheduler reads as stopped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from appliance.platform import stopping
from appliance.sync.pipeline import EmbedWritePipeline, Work
from appliance.sync.state import ALIVE_FILE, SCHEDULER_FILE, hold_alive_lock, process_marker, read_scheduler_state


def _forget_stop() -> None:
    """Forget a requested stop: these tests run several stops in one process."""
    stopping._requested.clear()
    stopping._reason.clear()


@pytest.fixture(autouse=True)
def _fresh_stop():
    _forget_stop()
    yield
    _forget_stop()


def test_stop_abandons_queued_work_but_finishes_the_write_in_flight() -> None:
    written: list[int] = []
    writing = threading.Event()

    def embed(texts: list[str]) -> list[list[float]]:
        time.sleep(0.3 if not writing.is_set() else 30)  # once the first write runs, the model is "slow"
        return [[0.0]] * len(texts)

    def write(works: list[Work]) -> None:
        writing.set()
        time.sleep(1.0)  # the write in flight
        written.extend(len(w.rows) for w in works)

    threading.Thread(target=lambda: (writing.wait(30) and time.sleep(0.2)) or stopping.request("test")).start()
    started = time.monotonic()
    with pytest.raises(stopping.Stopped), EmbedWritePipeline(embed, write, ahead_chunks=8, batch_chunks=4) as pipeline:
        for i in range(100):  # blocks once 8 chunks wait for the model
            pipeline.put(Work([f"s{i}"], [{"id": j} for j in range(4)], ["t"] * 4))
        pipeline.close()
    elapsed = time.monotonic() - started
    assert written and all(n == 4 for n in written), written  # whole works only
    assert elapsed < 5, f"the stop waited for the model: {elapsed:.1f} s"
    assert stopping.wait_quiet(0.1)  # the pipeline unregistered


def test_pipeline_close_raises_stopped_when_stopped_while_draining() -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        time.sleep(0.2)
        return [[0.0]] * len(texts)

    with (pytest.raises(stopping.Stopped),
          EmbedWritePipeline(embed, lambda works: None, ahead_chunks=100, batch_chunks=1) as pipeline):
        for i in range(20):
            pipeline.put(Work([i], [{}], ["t"]))
        threading.Timer(0.3, stopping.request).start()
        started = time.monotonic()
        pipeline.close()
    assert time.monotonic() - started < 2


def test_stop_kills_a_conversion_that_never_ends(tmp_path: Path, slow_conversions: dict[str, str]) -> None:
    from appliance.ingest.isolate import ConvertPool

    stuck = tmp_path / "slow.html"  # HTML: converted in a worker (plain text is decoded in this process)
    stuck.write_text("<p>converting this takes an hour</p>\n")
    plain = tmp_path / "plain.html"
    plain.write_text("<p>hello</p>\n")
    pool = ConvertPool(workers=1, timeout_s=600, memory_bytes=0, ocr=None, max_file_size=1 << 20)
    results: list[object] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            # four in flight: files take the single worker in input order (isolate._Turns), so the
            # hour-long second file cannot take it before the first
            for item in pool.imap([plain, stuck, plain, plain], in_flight=4):
                results.append(item)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=consume)
    thread.start()
    try:
        deadline = time.monotonic() + 180  # a worker's imports: seconds, minutes on a crowded machine
        while not results and not errors and time.monotonic() < deadline:
            time.sleep(0.05)
        assert results, f"the first file should convert (errors: {errors!r})"
        pids = pool.worker_pids()
        assert pids
        started = time.monotonic()
        stopping.request("test")
        thread.join(10)
    finally:
        pool.abort()  # never leave the hour-long conversion behind
        pool.close()
    assert not thread.is_alive()
    assert time.monotonic() - started < 3
    assert len(errors) == 1 and isinstance(errors[0], stopping.Stopped), errors
    assert len(results) == 1  # the killed conversion is not reported as a failed file
    for pid in pids:
        assert _ends(pid, within=5.0), f"worker {pid} still runs"


def _ends(pid: int, within: float) -> bool:
    """Whether process `pid` is gone or a zombie within `within` seconds: a killed process still runs its exit
    for a moment, longer on a crowded machine (it was seen in state R right after the kill)."""
    deadline = time.monotonic() + within
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X") or time.monotonic() > deadline:
            return state in ("Z", "X")
        time.sleep(0.05)


# ---- a stale scheduler.json -------------------------------------------------------------------

def _write_state(db: Path, **values: object) -> None:
    db.mkdir(parents=True, exist_ok=True)
    (db / SCHEDULER_FILE).write_text(json.dumps({"schema": 1, "state": "syncing", "nextRunAt": 123.0, **values}))


def test_a_dead_schedulers_state_reads_as_stopped_and_interrupted(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _write_state(tmp_path, pid=dead.pid, **process_marker())
    state = read_scheduler_state(tmp_path)
    assert state["alive"] is False and state["state"] == "stopped" and state["interrupted"] is True
    assert state["recordedState"] == "syncing" and state["nextRunAt"] is None


def test_a_reused_pid_is_not_taken_for_the_scheduler(tmp_path: Path) -> None:
    marker = process_marker() | {"pidStartTicks": process_marker()["pidStartTicks"] - 1}  # another process, same pid
    _write_state(tmp_path, state="idle", pid=os.getpid(), **marker)
    state = read_scheduler_state(tmp_path)
    assert state["alive"] is False and state["state"] == "stopped" and state["interrupted"] is False


def test_a_live_scheduler_reads_as_alive(tmp_path: Path) -> None:
    _write_state(tmp_path, pid=os.getpid(), **process_marker())
    assert read_scheduler_state(tmp_path)["alive"] is True
    assert read_scheduler_state(tmp_path)["state"] == "syncing"


def test_the_alive_lock_answers_across_pid_namespaces(tmp_path: Path) -> None:
    other_container = process_marker() | {"pidNamespace": 1, "host": "elsewhere"}
    _write_state(tmp_path, pid=7, aliveLock=True, **other_container)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from appliance.sync.state import hold_alive_lock; "
                               "fd = hold_alive_lock(Path(sys.argv[1])); print(fd, flush=True); time.sleep(60)",
                               str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    try:
        assert holder.stdout.readline().strip() != "None"
        assert read_scheduler_state(tmp_path)["alive"] is True
    finally:
        holder.kill()
        holder.wait()
    state = read_scheduler_state(tmp_path)  # the kernel released the lock with the process
    assert state["alive"] is False and state["state"] == "stopped"
    assert (tmp_path / ALIVE_FILE).exists()


def test_another_namespaces_pid_without_a_lock_is_unknown(tmp_path: Path) -> None:
    _write_state(tmp_path, state="idle", pid=7, **(process_marker() | {"pidNamespace": 1}))
    state = read_scheduler_state(tmp_path)
    assert state["alive"] is None and state["state"] == "idle"


def test_a_stopped_state_is_left_alone(tmp_path: Path) -> None:
    _write_state(tmp_path, state="stopped", pid=7)
    assert "alive" not in read_scheduler_state(tmp_path)
    assert hold_alive_lock(tmp_path / "x") is not None
