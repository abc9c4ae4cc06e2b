"""A round's process reads less ahead while it folds, for an index on local disk only (sync.rounds)."""
from __future__ import annotations

import os

import pytest

from appliance.config import load_settings
from appliance.sync.rounds import FOLD_READ_AHEAD, bound_read_ahead


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FOLD_READ_AHEAD:
        monkeypatch.delenv(name, raising=False)


def test_a_local_index_gets_the_bounded_read_ahead_and_a_users_value_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANCE_IO_THREADS", "6")
    bound_read_ahead(load_settings({"BASE_DIR": "/tmp", "DB_PATH": "/srv/index"}))
    assert os.environ["LANCE_IO_THREADS"] == "6"
    assert os.environ["LANCE_DEFAULT_BATCH_SIZE"] == FOLD_READ_AHEAD["LANCE_DEFAULT_BATCH_SIZE"]


def test_an_index_in_a_bucket_keeps_lancedbs_parallel_requests() -> None:
    bound_read_ahead(load_settings({"BASE_DIR": "/tmp", "DB_PATH": "s3://team-docs/index",
                                    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
                                    "AWS_DEFAULT_REGION": "eu-central-1", "STATE_DIR": "/tmp/state"}))
    assert not any(name in os.environ for name in FOLD_READ_AHEAD)
