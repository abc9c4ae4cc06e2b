"""Crash safety: real `minirag` processes killed with SIGKILL, then one sync must converge.

The random trials are a reduced `scripts/faults_crash.py` (tiny model, small corpus);
the full run is `scripts/faults_crash.py --trials 50`. The regression tests stop a
write at an exact commit (the state a kill -9 leaves there, since every LanceDB
commit is atomic) and check that the next sync repairs what the old code left
broken for good.
"""
from __future__ import annotations

import shutil

import pytest

from scripts.faults_crash import Checker, crash_trials, generated_text, make_lab

pytestmark = [pytest.mark.faults, pytest.mark.timeout(1800)]  # process starts: slow on a loaded machine

TRIALS = 6


@pytest.fixture(scope="module")
def lab(shared, tmp_path_factory):  # type: ignore[no-untyped-def]
    return make_lab(tmp_path_factory.mktemp("crash"), files=12, model="tiny", seed=5, shared=shared)


@pytest.fixture(scope="module")
def embedder(lab):  # type: ignore[no-untyped-def]
    return Checker(lab.env).embedder


def test_random_kills_of_sync_and_ingest_always_converge(lab) -> None:  # type: ignore[no-untyped-def]
    summary = crash_trials(lab, TRIALS, seed=11)
    assert summary["trials"] == TRIALS and summary["byKind"]["ingest"] >= 1
    assert summary["failures"] == [], summary["failures"]
    assert summary["killedMidRun"] >= TRIALS // 2, "the kills should land while the process runs"
    assert summary["orphans"] == 0  # conversion workers die with their parent
    assert summary["concurrentQueries"] > 0
    assert summary["referenceChunks"] > 0


class Killed(BaseException):
    """Stands for SIGKILL inside one process: nothing after the chosen commit runs."""


def _kill_at(monkeypatch, table: str, method: str) -> None:  # type: ignore[no-untyped-def]
    """Make the first `table.method` call (chunks/sources, e.g. add) stop the process before it commits."""
    from appliance.storage import tables as store

    opener = getattr(store.Tables, table)

    def patched(self, create=False):  # type: ignore[no-untyped-def]
        handle = opener(self, create)
        if handle is not None:
            def die(*args, **kwargs):  # type: ignore[no-untyped-def]
                raise Killed(f"{table}.{method}")
            setattr(handle, method, die)
        return handle

    monkeypatch.setattr(store.Tables, table, patched)


@pytest.fixture
def small(lab, embedder, tmp_path):  # type: ignore[no-untyped-def]
    """Two generated documents, indexed; a Checker on their index; its reference."""
    import random

    docs = tmp_path / "docs"
    docs.mkdir()
    for n in (1, 2):
        (docs / f"doc{n}.md").write_text(generated_text(random.Random(n), n, 6), "utf-8")
    env = {**lab.env, "BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "index")}
    checker = Checker(env, embedder)
    checker.fresh().sync()
    reference = checker.snapshot()["chunks"]
    assert len(reference) == 2 and all(reference.values())
    return docs, checker, reference


def test_ingest_killed_while_replacing_its_chunks_leaves_the_old_ones_whole(small, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A source's chunks are replaced by one merge (appliance/storage/swap.py). Before, the old chunks were
    # deleted in one commit and the new ones added in another, and a process killed between them
    # left the file unsearchable until a sync repaired it; now there is no such moment to be killed in.
    docs, checker, reference = small
    with monkeypatch.context() as patch:
        _kill_at(patch, "chunks", "merge_insert")
        with pytest.raises(Killed):
            checker.fresh().ingest([docs / "doc1.md"])
    assert checker.differences(reference) == []  # the old chunks, all of them, still there
    assert checker.fresh().status().wire()["index"].get("consistencyWarning") is None
    checker.fresh().sync()
    assert checker.differences(reference) == []


def test_chunks_of_a_new_file_killed_before_its_source_row_are_removed(small, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Chunks committed, source row not: when the file is gone by the next sync, no
    # source row names them, so before the fix they stayed searchable forever.
    docs, checker, reference = small
    extra = docs / "extra.md"
    extra.write_text(generated_text(__import__("random").Random(9), 9, 4), "utf-8")
    with monkeypatch.context() as patch:
        _kill_at(patch, "sources", "merge_insert")
        with pytest.raises(Killed):
            checker.fresh().sync()
    assert str(extra) in checker.snapshot()["chunks"]
    extra.unlink()
    checker.fresh().sync()
    assert checker.differences(reference) == []


def test_sync_killed_before_the_keyword_index_caught_up_is_completed(small, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Rows written, the fold not reached: the next sync has nothing to index and
    # before the fix left those rows outside the BM25 index. (Folding is due at once here.)
    from appliance.storage import writes as store_writes

    monkeypatch.setattr(store_writes, "FOLD_DUE_ROWS", 1)
    docs, checker, reference = small
    shutil.copy(docs / "doc1.md", docs / "copy.md")
    with monkeypatch.context() as patch:
        _kill_at(patch, "chunks", "to_lance")
        with pytest.raises(Killed):
            checker.fresh().sync()
    assert checker.snapshot()["unindexed"] > 0
    checker.fresh().sync()
    assert checker.snapshot()["unindexed"] == 0
    (docs / "copy.md").unlink()
    checker.fresh().sync()
    assert checker.differences(reference) == []
