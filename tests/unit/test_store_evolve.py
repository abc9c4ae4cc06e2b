"""An index written before a field existed gains it on open, without re-embedding."""
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa

from appliance.config import replica_budget
from appliance.languages import language
from appliance.storage.index import Index
from appliance.storage.tables import CHUNKS, chunk_schema


def test_missing_fields_are_added_with_defaults_and_vectors_kept(tmp_path: Path) -> None:
    dim = 8
    full = chunk_schema(dim)
    old = pa.schema([f for f in full if f.name not in ("doc_class", "also_unchanged_on", "snapshot_date")])
    vector = (np.arange(dim, dtype="float32") / 10).tolist()
    row = {f.name: None for f in old} | {"id": "k:0", "source_id": "/docs/a.md", "text": "old row", "vector": vector}
    lancedb.connect(str(tmp_path)).create_table(CHUNKS, data=pa.Table.from_pylist([row], schema=old))

    index = Index(tmp_path, dim, memory_budget=replica_budget())
    table = index.chunks()
    assert set(full.names) <= set(table.schema.names)
    [stored] = index.reader.chunk_rows("id = 'k:0'", ["text", "doc_class", "also_unchanged_on", "vector"])
    assert stored["text"] == "old row" and stored["doc_class"] == "note"
    assert np.allclose(stored["vector"], vector)
    again = Index(tmp_path, dim, memory_budget=replica_budget())
    assert again.chunks().count_rows() == 1  # a second open changes nothing


def test_an_index_from_before_stored_languages_gets_them_from_its_texts(tmp_path: Path) -> None:
    """Opening a table written before `lang` existed derives it from each row's text (tables._evolve); a row
    still without one (an older version's write) has its language read from its text by id."""
    texts = ["Die Pumpe wird mit der Hand getauscht und nicht mit dem Werkzeug.",
             "The pump is replaced by hand and not with the tool.", "Насос заменяют вручную.", "ERR_7741 42"]
    old = pa.schema([f for f in chunk_schema(4) if f.name != "lang"])
    rows = [{f.name: None for f in old} | {"id": f"k:{n}", "source_id": "/docs/a.md", "chunk_index": n, "text": t,
                                           "parent_id": "k:s0", "vector": [1.0, 0.0, 0.0, float(n)]}
            for n, t in enumerate(texts)]
    lancedb.connect(str(tmp_path)).create_table(CHUNKS, pa.Table.from_pylist(rows, schema=old))
    index = Index(tmp_path, 4, memory_budget=replica_budget())
    chunks = index.chunks()
    assert chunks is not None
    stored = {r["id"]: r["lang"] for r in chunks.search().select(["id", "lang"]).limit(None).to_list()}
    assert stored == {"k:0": "de", "k:1": "en", "k:2": "ru", "k:3": ""}
    chunks.update(where="id = 'k:1'", values_sql={"lang": "NULL"})
    index.tables.memory_budget = 0  # no replica: what the lists did not carry is read by id
    found = index.reader.passage_languages(["k:0", "k:1", "k:3"], language, {"k:0": "de", "k:3": None})
    assert found == {"k:0": "de", "k:1": "en", "k:3": None}
