"""A `minirag sync` killed (SIGKILL) while its end settles deleted rows (storage.writes.SETTLED_DELETIONS): the
rewrite of the fragments and the indexes' remap commit at once or not at all, so the index opens and answers with
what the sync wrote, what it deleted stays deleted, and the next sync settles what is left."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.service import Appliance
from appliance.storage import writes
from scripts.faults_crash import generated_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
FILES = 40
CHILD = """
import os, runpy, sys
from pathlib import Path
from appliance.storage import writes
real_fold = writes.fold

def fold(table, **options):
    if options.get("settle"):  # the parent kills this process a moment after it sees the mark
        Path(os.environ["SETTLE_MARK"]).write_text(table.name)
    real_fold(table, **options)

writes.fold = fold
sys.argv = ["minirag", "sync"]
runpy.run_module("appliance", run_name="__main__")
"""


def _killed_while_settling(env: dict[str, str], mark: Path, delay: float) -> bool:
    """Run the sync in a child and kill it `delay` s after its settling fold starts; whether it was still running."""
    mark.unlink(missing_ok=True)
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD)], env={**env, "SETTLE_MARK": str(mark)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not mark.exists():
        assert child.poll() is None, f"the sync ended before settling: {child.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, "no settling fold within the timeout"
        time.sleep(0.005)
    time.sleep(delay)
    running = child.poll() is None
    child.send_signal(signal.SIGKILL)
    child.wait(60)
    return running


def test_a_sync_killed_while_it_settles_leaves_an_index_the_next_sync_settles(
        tmp_path: Path, make_app: Callable[..., Appliance], models_dir: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    rng = random.Random(5)
    for n in range(FILES):
        (docs / f"note{n:02d}.md").write_text(generated_text(rng, n, 2), "utf-8")
    app = make_app(docs)
    assert app.sync().added == FILES
    env = {**os.environ, "BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "index"), "MODELS_DIR": str(models_dir),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    removed: set[str] = set()
    killed_running = left_unsettled = 0
    for trial, delay in enumerate((0.0, 0.05, 0.15, 0.4)):
        edited = docs / f"note{trial:02d}.md"
        edited.write_text(f"# Note {trial}\n\nThe gasket in bay {trial} was replaced by ZEBRAKEY_{trial}.\n", "utf-8")
        gone = docs / f"note{20 + trial:02d}.md"
        gone.unlink()
        removed.add(str(gone))
        killed_running += _killed_while_settling(env, tmp_path / "settling", delay)

        app.index.tables.refresh_handles()
        left_unsettled += writes.has_deletions(app.index.tables.chunks())
        indexed = {s.source_id for s in app.index.registry.file_sources()}
        assert indexed == {str(p) for p in docs.glob("*.md")}  # what the sync wrote and deleted, before its end
        assert not indexed & removed
        hits = app.search(f"ZEBRAKEY_{trial} gasket", top_k=3).results
        assert hits and hits[0].source == str(edited)
        counts = app.index.registry.chunk_counts()
        assert sum(counts.values()) == app.index.registry.count_chunks()
    assert killed_running >= 2  # most kills landed inside the settling fold, not after the process ended
    assert left_unsettled >= 1  # and one before its rewrite committed

    report = app.sync()
    assert (report.added, report.updated, report.deleted) == (0, 0, 0)
    app.index.tables.refresh_handles()
    for table in (app.index.tables.chunks(), app.index.tables.sources()):
        assert table is not None and not writes.has_deletions(table)
    assert {s.source_id for s in app.index.registry.file_sources()} == {str(p) for p in docs.glob("*.md")}
    for trial in range(4):
        assert app.search(f"ZEBRAKEY_{trial}", top_k=1).results[0].source == str(docs / f"note{trial:02d}.md")
