"""The job registry: sync jobs one at a time, ingest jobs queued one after another and bounded in number."""
from __future__ import annotations

import threading
import time

import pytest

from appliance.errors import SyncBusy
from appliance.jobs import MAX_PENDING_INGESTS, SyncJobs
from appliance.service import RunReport


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
