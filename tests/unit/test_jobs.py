"""The job registry: sync jobs one at a time, ingest jobs queued one after another and bounded in number."""
from __future__ import annotations

import threading
import time

import pytest

from appliance.errors import SyncBusy
from appliance.service import RunReport
from appliance.sync import jobs as jobs_module
from appliance.sync.jobs import MAX_PENDING_INGESTS, SyncJobs


def wait_until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_ingest_jobs_run_in_turn_are_bounded_and_leave_sync_alone() -> None:
    jobs, gate, order = SyncJobs(), threading.Event(), []

    def run(name: str):  # type: ignore[no-untyped-def]
        def body(_progress):  # type: ignore[no-untyped-def]
            order.append(name)
            gate.wait(10)
            return RunReport(seen=1, added=1, updated=0, unchanged=0)
        return body

    started = [jobs.start_ingest("ingest_data", f"s{n}", run(f"s{n}")) for n in range(MAX_PENDING_INGESTS)]
    wait_until(lambda: jobs.get(started[0].job_id).phase == "indexing")  # a job record is a snapshot: poll it
    assert [jobs.get(j.job_id).phase for j in started[1:]] == ["queued"] * (MAX_PENDING_INGESTS - 1)
    with pytest.raises(SyncBusy, match="ingest jobs"):
        jobs.start_ingest("ingest_url", "one-more", run("late"))
    sync = jobs.start(None, run("sync"))  # a sync is not held up by the ingest queue
    assert sync.kind == "sync" and sync.source is None
    with pytest.raises(SyncBusy, match="Sync job"):
        jobs.start(None, run("second sync"))
    gate.set()
    wait_until(lambda: all(jobs.get(j.job_id).finished_at is not None for j in started))
    assert [n for n in order if n.startswith("s") and n != "sync"] == [f"s{n}" for n in range(MAX_PENDING_INGESTS)]
    done = jobs.get(started[-1].job_id)
    assert done.phase == "succeeded" and done.kind == "ingest_data" and done.counts and done.counts["added"] == 1
    assert done.files_done == done.files_total == 1


def test_a_cancel_stops_a_running_job_through_its_own_stop_hooks_and_a_queued_one_at_once() -> None:
    from appliance.platform import stopping

    jobs = SyncJobs()
    outside = threading.Event()  # a hook of the process, not of the job: a cancel leaves it alone
    stopping.add_hook(outside.set)

    def sync_like(_progress):  # type: ignore[no-untyped-def]
        hooked = threading.Event()
        stopping.add_hook(hooked.set)  # as the sync's worker pool and pipeline register themselves
        try:
            hooked.wait(30)
            stopping.check()  # raises Cancelled on this job's thread
        finally:
            stopping.remove_hook(hooked.set)
        raise AssertionError("not cancelled")

    try:
        running = jobs.start(None, sync_like)
        first = jobs.start_ingest("ingest_data", "a", sync_like)
        queued = jobs.start_ingest("ingest_data", "b", sync_like)
        wait_until(lambda: jobs.get(first.job_id).phase == "indexing")
        assert jobs.cancel_source("b") == [queued.job_id]
        wait_until(lambda: jobs.get(queued.job_id).phase == "cancelled")
        for job in (running, first):
            jobs.cancel(job.job_id)
            wait_until(lambda job=job: jobs.get(job.job_id).phase == "cancelled")  # type: ignore[misc]
            assert jobs.get(job.job_id).error.code == "cancelled"  # type: ignore[union-attr]
        assert not outside.is_set() and not stopping.requested()
    finally:
        stopping.remove_hook(outside.set)



class _SlowJobClock:
    """time as the job module sees it, but a job thread's reading takes 0.3 s: it widens the moment
    between a job's last two updates so that a poller lands in it every time."""

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    def time(self) -> float:
        if threading.current_thread().name.startswith("sync-"):
            time.sleep(0.3)
        return time.time()


def test_a_job_seen_finished_lets_the_next_sync_start_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A poller that sees a final phase may start the next sync straight away (as an agent polling
    sync_status does): the job must already count as finished then."""
    monkeypatch.setattr(jobs_module, "time", _SlowJobClock())
    jobs = SyncJobs()

    def quick(_progress):  # type: ignore[no-untyped-def]
        return RunReport(seen=1, added=0, updated=0, unchanged=1)

    job = jobs.start(None, quick)
    wait_until(lambda: jobs.get(job.job_id).phase in ("succeeded", "failed", "cancelled"))
    second = jobs.start(None, quick)  # SyncBusy if the first still counted as running
    wait_until(lambda: jobs.get(second.job_id).phase == "succeeded")
