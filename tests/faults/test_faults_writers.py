"""Several processes writing one index at once lose nothing and misname nothing.

A reduced `scripts/faults_writers.py` (tiny model, small corpus, 45 s); the full run is
`scripts/faults_writers.py --seconds 600`.
"""
from __future__ import annotations

import os

import pytest

from scripts.faults_writers import run

pytestmark = [pytest.mark.faults, pytest.mark.timeout(1800)]


def test_a_syncing_an_ingesting_and_a_reading_process_share_one_index(shared) -> None:  # type: ignore[no-untyped-def]
    os.environ.setdefault("MINIRAG_SHARED", str(shared))
    result = run(seconds=45, files=16, model="tiny", seed=3)
    assert result["problems"] == [], result["problems"]
    roles = result["roles"]
    assert roles["sync"]["ops"] >= 1 and roles["ingest"]["ops"] >= 10 and roles["read"]["ops"] >= 10
    assert result["itemsStored"] >= 10
    print("commit conflicts retried:", result["conflictsRetried"])
