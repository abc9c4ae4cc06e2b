"""Which languages an index holds: the writer stores each chunk's (`lang`), a query reads them once a version,
from the replica or from LanceDB, and a row written before the column existed makes them unknown."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from appliance.config import replica_budget
from appliance.languages import language
from appliance.storage.index import Index
from appliance.storage.tables import CHUNKS, SourceRow, chunk_schema, stored_language

DIM = 8
ENGLISH = "The pump sits behind the belt and it must be checked every year."
GERMAN = "Die Pumpe sitzt hinter dem Zahnriemen und muss jedes Jahr geprüft werden."
RUSSIAN = "Насос стоит за ремнём, и его надо проверять каждый год."
ROOT = Path(__file__).resolve().parents[2]


def _rows(source: str, texts: list[str]) -> list[dict]:
    rng = np.random.default_rng(len(source))
    out = []
    for i, text in enumerate(texts):
        v = rng.normal(size=DIM).astype("float32")
        out.append({f.name: None for f in chunk_schema(DIM)} | {
            "id": f"{source}:{i}", "source_id": source, "parent_id": f"{source}#0", "chunk_index": i,
            "text": text, "keywords": "x", "ingested_at": time.time(), "vector": (v / np.linalg.norm(v)).tolist()})
    return out


def _write(index: Index, source: str, texts: list[str]) -> None:
    index.writes.replace_sources([SourceRow(source_id=source, source_kind="file")], _rows(source, texts))


def _held(index: Index) -> frozenset[str] | None:
    with index.reader.query_view():
        return index.reader.held_languages()


@pytest.mark.parametrize("budget", [None, 0], ids=["replica", "lancedb"])
def test_the_languages_held_follow_each_commit(tmp_path: Path, budget: int | None) -> None:
    index = Index(tmp_path, DIM, memory_budget=replica_budget() if budget is None else budget)
    assert _held(index) == frozenset()  # no table yet
    _write(index, "/docs/a.md", [ENGLISH, "ERR_ZORBLATT_7741 0x7f"])  # an identifier reads as no language
    assert _held(index) == {"en"}
    stored = index.reader.chunk_rows("source_id = '/docs/a.md'", ["text", "lang"])
    assert [r["lang"] for r in stored] == [stored_language(r["text"]) for r in stored] == ["en", ""]
    _write(index, "/docs/b.md", [GERMAN])
    assert _held(index) == {"en", "de"}
    _write(index, "/docs/b.md", [RUSSIAN])  # the German passage replaced
    assert _held(index) == {"en", "ru"}
    index.writes.delete_sources(["/docs/b.md"])
    assert _held(index) == {"en"}
    assert (index.reader._replica is not None) == (budget is None)


def test_an_upgraded_table_gets_its_languages_and_a_row_without_one_makes_them_unknown(tmp_path: Path) -> None:
    """A table written before `lang` existed gets it on open, from its texts (tables._evolve). A row an older
    version writes afterwards has none: then nothing can be ruled out until that row is written again."""
    full = chunk_schema(DIM)
    old = pa.schema([f for f in full if f.name != "lang"])
    texts = [GERMAN, ENGLISH, RUSSIAN, "ERR_7741 42"]
    rows = [{k: v for k, v in row.items() if k != "lang"} for row in _rows("/docs/old.md", texts)]
    lancedb.connect(str(tmp_path)).create_table(CHUNKS, data=pa.Table.from_pylist(rows, schema=old))
    index = Index(tmp_path, DIM, memory_budget=replica_budget())
    stored = index.reader.chunk_rows("source_id = '/docs/old.md'", ["chunk_index", "lang"])
    assert [r["lang"] for r in sorted(stored, key=lambda r: r["chunk_index"])] == ["de", "en", "ru", ""]
    assert _held(index) == {"de", "en", "ru"}
    assert Index(tmp_path, DIM, memory_budget=replica_budget()).chunks().count_rows() == 4  # a second open: as is
    older = _rows("/docs/older.md", [ENGLISH])[0] | {"lang": None}
    index.chunks().add(pa.Table.from_pylist([older], schema=full))
    assert _held(index) is None
    _write(index, "/docs/older.md", [ENGLISH])
    assert _held(index) == {"de", "en", "ru"}


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from tests.unit.test_held_languages import DIM, GERMAN, _write
    from appliance.storage.index import Index
    index = Index(Path(sys.argv[2]), DIM, memory_budget=0)
    for n in range(int(sys.argv[3])):
        _write(index, f"/docs/de{n}.md", [GERMAN])
        time.sleep(0.05)
""")


@pytest.mark.parametrize("budget", [None, 0], ids=["replica", "lancedb"])
def test_each_version_read_while_another_process_writes_gets_its_own_languages(tmp_path: Path,
                                                                                budget: int | None) -> None:
    """Another process commits German passages one by one; every query view of this one finds German held
    exactly when the version it reads holds a German row."""
    index = Index(tmp_path, DIM, memory_budget=replica_budget() if budget is None else budget)
    _write(index, "/docs/a.md", [ENGLISH])
    writes = 12
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(ROOT), str(tmp_path), str(writes)])
    seen = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with index.reader.query_view():
                german = len([r for r in index.reader.chunk_rows("lang = 'de'", ["text"])
                              if language(r["text"]) == "de"])
                assert ("de" in (index.reader.held_languages() or ())) == (german > 0)
            seen.add(german)
            if child.poll() is not None and (german == writes or child.returncode):
                break
            time.sleep(0.02)
    finally:
        child.wait(timeout=60)
    assert child.returncode == 0 and seen >= {0, writes}
