"""A fold removes the files of the versions it replaced (writes.KEEP_REPLACED_FILES); a reader or a writer in
another process still on such a version reads again at the latest one instead of calling the index damaged.
Here the window is 0, so the first fold removes every replaced file: the race made certain."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from appliance.config import replica_budget
from appliance.errors import IndexCorrupt
from appliance.storage import tables, writes
from appliance.storage.index import Index
from tests.fixtures.chunks import write_passages
from tests.fixtures.embedders import HashEmbedder

EMBEDDER = HashEmbedder()
pytestmark = pytest.mark.filterwarnings("ignore:optimize\\(cleanup_older_than=0\\):UserWarning")


def _write(index: Index, source_id: str, texts: list[str]) -> None:
    write_passages(index, EMBEDDER, source_id, texts)


@pytest.mark.parametrize("budget", [0, replica_budget()], ids=["lancedb", "replica"])
def test_a_reader_on_a_version_whose_files_a_fold_removed_reads_the_latest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    monkeypatch.setattr(writes, "KEEP_REPLACED_FILES", timedelta(0))
    # the reader's handles must stay on the old version until the query: LanceDB's own consistency check would
    # move them to the latest once READ_CONSISTENCY_S has passed (a loaded machine), and the race would not happen
    monkeypatch.setattr(tables, "READ_CONSISTENCY_S", 3600.0)
    writer = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=budget)
    for n in range(6):  # six small fragments for the fold to compact
        _write(writer, f"/docs/{n}.md", [f"pump {n} needs oil", f"valve {n} is stuck"])
    reader = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=budget)  # stands in for another process
    assert reader.registry.count_chunks() == 12  # its handles now hold this version
    writer.writes.refresh_indexes(fold_now=True)  # compacts: the files of that version are gone
    _write(writer, "/docs/new.md", ["the new pump manual"])
    writer.writes.refresh_indexes(fold_now=True)

    hits = reader.reader.vector_search(EMBEDDER.embed_query("pump oil"), 20, None, ["id", "text"])
    assert {h["id"] for h in hits} >= {"/docs/0.md:0", "/docs/new.md:0"}
    assert reader.registry.count_chunks() == 13
    assert reader.tables.files_vanished >= 1
    _write(reader, "/docs/0.md", ["the pump was replaced"])  # a write from the stale side too
    writer.checkout_latest()
    assert writer.registry.count_chunks() == 12


def test_a_file_missing_from_the_latest_version_is_still_damage(tmp_path: Path) -> None:
    index = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=0)
    _write(index, "/docs/a.md", ["pump oil", "valve"])
    for data in (tmp_path / "chunks.lance" / "data").glob("*.lance"):
        data.unlink()
    fresh = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=0)
    with pytest.raises(IndexCorrupt):
        fresh.reader.vector_search(EMBEDDER.embed_query("pump"), 5, None, ["id", "text"])


WRITER = """
import sys, time
from datetime import timedelta
from pathlib import Path
from appliance.storage import writes
from appliance.storage.index import Index
from tests.unit.test_vanished_files import EMBEDDER, _write
writes.KEEP_REPLACED_FILES = timedelta(0)
index = Index(Path(sys.argv[1]), EMBEDDER.spec.dim, memory_budget=int(sys.argv[2]))
deadline = time.monotonic() + float(sys.argv[3])
n = 0
while time.monotonic() < deadline:
    _write(index, f"/docs/w{n % 7}.md", [f"pump {n} needs oil", f"valve {n} is stuck", f"gear {n}"])
    if n % 3 == 2:
        index.writes.refresh_indexes(fold_now=True)
    n += 1
print(n)
"""


@pytest.mark.slow
@pytest.mark.parametrize("budget", [0, replica_budget()], ids=["lancedb", "replica"])
def test_queries_answer_while_another_process_folds_and_removes_replaced_files(tmp_path: Path, budget: int) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    index = Index(tmp_path, EMBEDDER.spec.dim, memory_budget=budget)
    _write(index, "/docs/first.md", ["the first pump manual"])
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(budget), "20"], cwd=root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    queries = 0
    while writer.poll() is None:
        with index.reader.query_view():
            hits = index.reader.vector_search(EMBEDDER.embed_query("pump oil"), 10, None, ["id", "text"])
            index.reader.keyword_side("pump valve", 10, None, ["id", "text"])
            index.reader.section_rows(sorted({h["id"].rsplit(":", 1)[0] + "#0" for h in hits}), ["id", "text"])
            # what a search reads to tell copies apart and then whole: passages by id, sections and copies' rows
            bodies = index.reader.passage_bodies([{"id": h["id"]} for h in hits])
            rows = index.reader.section_rows([], ["id", "text"], [h["id"] for h in hits])
        assert any(h["id"] == "/docs/first.md:0" for h in hits) or len(hits) == 10
        found = {h["id"] for h in hits}
        assert set(bodies) <= found and {r["id"] for r in rows} <= found
        if "/docs/first.md:0" in found:  # never rewritten: always there to read
            assert bodies["/docs/first.md:0"] == "the first pump manual"
            assert "/docs/first.md:0" in {r["id"] for r in rows}
        queries += 1
    out, err = writer.communicate()
    assert writer.returncode == 0, err[-3000:]
    assert int(out) > 10 and queries > 10
    versions = list((tmp_path / "chunks.lance" / "_versions").glob("*.manifest"))
    assert len(versions) < int(out)  # the folds removed what they replaced
