"""Which text goes into a chunk's vector: the document's title rides along with every chunk."""
from __future__ import annotations

from pathlib import Path

from appliance.config import load_settings
from appliance.service import Appliance
from tests.fixtures.embedders import MODELS_DIR, HashEmbedder


def test_every_chunk_of_a_document_without_sections_embeds_its_title(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    body = " ".join(f"Sentence {i} says the panels need a rinse after every dust storm." for i in range(60))
    (docs / "panels.md").write_text(f"# Solar panel maintenance\n\n{body}\n", encoding="utf-8")
    recorder = HashEmbedder()
    app = Appliance(load_settings({"BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "db"), "CHUNK_TOKEN_BUDGET": "64",
                                   "MODELS_DIR": str(MODELS_DIR)}), embedder=recorder)
    app.sync()
    stored = [row["text"] for row in app.index.reader.chunk_rows("chunk_index >= 0", ["text", "chunk_index"])]
    assert len(recorder.passages) == len(stored) > 3
    assert all("Solar panel maintenance" in t for t in recorder.passages)
    assert sum("Solar panel maintenance" in t for t in stored) == 1  # the stored text stays the document's
