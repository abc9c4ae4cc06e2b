"""An index written before a field existed gains it on open, without re-embedding."""
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa

from appliance.config import replica_budget
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
