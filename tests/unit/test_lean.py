"""appliance/platform/hidden_imports.py: packages whose __init__ is deferred still work, and really are not loaded;
a block changes only the imports of the thread inside it.

Import state is per process, so the checks on lancedb and fastembed run in fresh interpreters.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from appliance.platform.hidden_imports import _scoped, pandas_hidden

ROOT = Path(__file__).resolve().parents[2]


def is_deferred(module) -> bool:  # type: ignore[no-untyped-def]
    """True while `module`'s real `__init__` has not run yet: lean marks the `__getattr__` it stands in with."""
    return getattr(module.__dict__.get("__getattr__"), "__deferred__", False)


def _run(code: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture()
def fake_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    root = tmp_path / "site"
    pkg = root / "leanfake"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import os\nRUNS = int(os.environ.get('LEANFAKE_RUNS', '0')) + 1\nos.environ['LEANFAKE_RUNS'] = str(RUNS)\n"
        "if os.environ.get('LEANFAKE_FAIL'):\n    raise RuntimeError('broken init')\n"
        "from leanfake.heavy import Heavy\n__all__ = ['Heavy']\n", encoding="utf-8")
    (pkg / "heavy.py").write_text("class Heavy:\n    pass\n", encoding="utf-8")
    (pkg / "light.py").write_text("VALUE = 42\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("LEANFAKE_RUNS", "0")
    yield "leanfake"
    for name in [m for m in sys.modules if m == "leanfake" or m.startswith("leanfake.")]:
        del sys.modules[name]


def test_a_deferred_init_runs_on_the_first_missing_attribute(fake_package: str) -> None:
    import os

    with _scoped(deferred={fake_package}):
        from leanfake.light import VALUE  # a submodule by its full name: the package's __init__ waits
    assert VALUE == 42
    pkg = sys.modules[fake_package]
    assert is_deferred(pkg) and os.environ["LEANFAKE_RUNS"] == "0" and "leanfake.heavy" not in sys.modules
    assert pkg.light.VALUE == 42 and is_deferred(pkg)  # a loaded submodule is an attribute already

    from leanfake import Heavy  # the first missing name runs the real __init__, once

    assert Heavy.__module__ == "leanfake.heavy" and not is_deferred(pkg)
    assert os.environ["LEANFAKE_RUNS"] == "1" and pkg.__all__ == ["Heavy"] and pkg.RUNS == 1
    with pytest.raises(AttributeError):
        pkg.missing  # noqa: B018
    assert os.environ["LEANFAKE_RUNS"] == "1"


def test_a_failing_deferred_init_raises_and_leaves_no_module(fake_package: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEANFAKE_FAIL", "1")
    with _scoped(deferred={fake_package}):
        import leanfake.light  # noqa: F401
    with pytest.raises(RuntimeError, match="broken init"):
        from leanfake import Heavy  # noqa: F401
    assert fake_package not in sys.modules


def test_outside_the_block_imports_are_ordinary(fake_package: str) -> None:
    with _scoped(deferred={"something_else"}):
        pass
    import leanfake

    assert not is_deferred(leanfake) and leanfake.RUNS == 1


def test_a_block_changes_only_its_own_threads_imports(fake_package: str) -> None:
    """Another thread importing while a block is open gets an ordinary import; sys.meta_path is not edited."""
    finders = list(sys.meta_path)
    seen: dict[str, object] = {}

    def other_thread() -> None:
        import leanfake

        seen["deferred"] = is_deferred(leanfake)
        seen["runs"] = leanfake.RUNS

    with _scoped(deferred={fake_package}), _scoped(hidden={fake_package}):
        assert sys.meta_path == finders
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join(30)
        assert seen == {"deferred": False, "runs": 1}
    for name in [m for m in sys.modules if m == "leanfake" or m.startswith("leanfake.")]:
        del sys.modules[name]
    with _scoped(hidden={fake_package}), pytest.raises(ModuleNotFoundError):
        import leanfake
    with _scoped(deferred={fake_package}):
        with _scoped(deferred={"something_else"}):
            import leanfake.light
        assert is_deferred(sys.modules[fake_package])
    import leanfake

    assert leanfake.RUNS == 2 and sys.meta_path == finders


def test_pandas_stays_hidden_only_inside_the_block() -> None:
    if "pandas" in sys.modules:
        pytest.skip("pandas was imported earlier in this process")
    with pandas_hidden(), pytest.raises(ModuleNotFoundError):
        import pandas  # noqa: F401


def test_the_index_loads_without_the_namespace_rest_client_and_works_locally(tmp_path: Path) -> None:
    """Every lancedb call the appliance makes on a local directory, with the REST client never loaded."""
    out = _run("""
        import sys
        import appliance.storage.tables  # noqa: F401  (imports lancedb inside pandas_hidden())
        import lancedb, pyarrow as pa
        from lancedb.index import FTS, BTree
        def is_deferred(module):
            return getattr(module.__dict__.get("__getattr__"), "__deferred__", False)

        def client_loaded():
            return sorted(m for m in sys.modules if m.startswith("lance_namespace_urllib3_client.api"))

        assert not client_loaded(), client_loaded()
        assert is_deferred(sys.modules["lance_namespace_urllib3_client"])
        db = lancedb.connect(sys.argv[1])
        schema = pa.schema([pa.field("id", pa.string()), pa.field("text", pa.string()),
                            pa.field("vector", pa.list_(pa.float32(), 4))])
        t = db.create_table("chunks", schema=schema)
        rows = [{"id": str(i), "text": f"word{i} common", "vector": [float(i), 1.0, 0.0, 0.5]} for i in range(300)]
        t.add(rows)
        t.create_scalar_index("id", index_type="BTREE")
        t.create_fts_index("text", use_tantivy=False)
        t.create_index(metric="cosine", vector_column_name="vector", index_type="IVF_HNSW_SQ", num_partitions=1)
        t.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
            [{"id": "1", "text": "word1 replaced", "vector": [1.0, 1.0, 0.0, 0.5]},
             {"id": "new", "text": "fresh", "vector": [0.0, 0.0, 1.0, 0.0]}])
        t.delete("id = '2'")
        t.update(where="id = '3'", values={"text": "word3 updated"})
        from appliance.storage.writes import fold
        fold(t)  # through pylance: compaction, index segments, cleanup
        assert t.count_rows() == 300, t.count_rows()
        assert t.search([1.0, 1.0, 0.0, 0.5]).limit(3).to_list()
        assert t.search("replaced", query_type="fts").limit(3).to_list()[0]["id"] == "1"
        assert {i.name for i in t.list_indices()} >= {"id_idx", "text_idx", "vector_idx"}, t.list_indices()
        assert t.index_stats("text_idx") is not None
        reader = db.open_table("chunks")
        reader.checkout_latest()
        assert reader.count_rows("text = 'fresh'") == 1
        assert "chunks" in db.table_names()
        db.drop_table("chunks")
        assert not client_loaded() and is_deferred(sys.modules["lance_namespace_urllib3_client"])
        import lance_namespace_urllib3_client as client  # whoever asks for the client gets all of it
        assert client.ApiClient.__name__ == "ApiClient" and client.__version__
        assert client_loaded() and not is_deferred(client)
        print("ok")
    """, str(tmp_path / "db"))
    assert out.strip().endswith("ok")
