"""The CI part of the daemon-mode load test (scripts/faults_load.py has the full run and the setup).

`minirag serve-http` and `minirag scheduler` run as in the container; 20 MCP clients over
streamable HTTP query for 15 s while the scheduler's sync indexes a few hundred new files.
No call may fail, and new files must become searchable batch by batch, before the sync ends.
"""
from __future__ import annotations

import pytest

from scripts.faults_load import run

pytestmark = [pytest.mark.faults, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(300)]


def test_queries_never_fail_and_new_files_appear_while_a_sync_runs(make_app, tmp_path) -> None:
    app = make_app(tmp_path / "docs")  # DB_PATH tmp_path/index: where run() puts the index
    # The watcher samples every 11th file: the 12 of the first 128-file batch are enough. It stops
    # as soon as it has seen them (about 60 s after the load on an idle 2-core machine); the
    # drain bound only matters on a machine busy with other work.
    figures = run(clients=20, seconds=15, files=300, base_files=10, drain_s=150, enough=12,
                  index_base=lambda folder: app.ingest([folder]), workdir=tmp_path)
    print(figures)
    assert figures["serverAlive"]
    assert figures["calls"] >= 20, figures
    assert figures["failedCalls"] == 0, figures["errors"]
    assert figures["watcher"]["failedCalls"] == 0, figures["watcher"]
    fresh = figures["freshness"]
    assert fresh["seen"] >= 1, fresh
    assert fresh["committedNeverSeen"] == 0, fresh
    assert fresh["seenBeforeCommit"] == 0, fresh
    # Visible per committed batch, not only once the whole sync is over.
    assert fresh["seenBeforeSyncFinished"] >= 1, figures
