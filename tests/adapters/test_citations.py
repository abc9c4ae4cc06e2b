"""Where a hit comes from: PDF pages, a slide number, a sheet name, through the service, the
in-memory MCP server and the CLI's hit line. The hashed-word embedder stands in for the model."""
from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from appliance.adapters.mcp_server import create_server
from appliance.adapters.runtime import Runtime
from appliance.assemble.citations import hit_place
from appliance.config import load_settings, read_environment
from appliance.service import Appliance
from tests.conftest import shared_path
from tests.fixtures.embedders import MODELS_DIR, HashEmbedder
from tests.fixtures.pdf_writer import write_pdf

CORPUS = shared_path() / "corpus"
pytestmark = pytest.mark.shared
FILLER = "plain words about the weather report and nothing in particular today"
PAGES = [  # pages longer than half the 256-token budget, so each page starts a chunk
    [FILLER] * 20,
    [FILLER.replace("weather", "harbour")] * 20,
    ["the zebra quartz phrase lives on page three only"] + [FILLER.replace("weather", "meadow")] * 14,
    [FILLER.replace("weather", "garden")] * 20,
]


@pytest.fixture(scope="module")
def app_and_server(tmp_path_factory: pytest.TempPathFactory) -> tuple[Appliance, Any]:
    tmp = tmp_path_factory.mktemp("cite")
    docs = tmp / "docs"
    docs.mkdir()
    write_pdf(docs / "manual.pdf", PAGES)
    for rel in ("markitdown/test.pptx", "markitdown/test.xlsx"):
        if not (CORPUS / rel).is_file():
            pytest.fail(f"shared test data is missing: {CORPUS / rel} (set MINIRAG_SHARED)")
        shutil.copy(CORPUS / rel, docs / Path(rel).name)
    settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(tmp / "db"),
                              "MODELS_DIR": str(MODELS_DIR)})
    app = Appliance(settings, embedder=HashEmbedder())
    report = app.sync()
    assert report.added == 3, report
    return app, create_server(Runtime.serving(app, read_environment({})))


def _mcp(server: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    async def run() -> Any:
        async with Client(server) as client:
            return await client.call_tool(name, args, raise_on_error=False)

    result = asyncio.run(run())
    assert not result.is_error, result.structured_content
    return result.structured_content


def _hit(results: list[dict[str, Any]], needle: str) -> dict[str, Any]:
    for hit in results:
        if needle in hit["text"]:
            return hit
    raise AssertionError(f"no hit holds {needle!r}: {[h['text'][:60] for h in results]}")


CASES = [
    ("zebra quartz phrase", "zebra quartz", {"pageStart": 3, "pageEnd": 3, "slide": None, "sheet": None}, " p.3"),
    ("a3f6004b-6f4f-4ea8-bee3-3741f4dc385f", "a3f6004b", {"slide": 4, "pageStart": None, "sheet": None},
     " slide 4"),
    ("affc7dad-52dc-4b98-9b5d-51e65d8a8ad0", "affc7dad",
     {"sheet": "09060124-b5e7-4717-9d07-3c046eb", "slide": None, "pageStart": None},
     " sheet 09060124-b5e7-4717-9d07-3c046eb"),
]


@pytest.mark.parametrize(("query", "needle", "fields", "place"), CASES, ids=["pdf-page", "pptx-slide", "xlsx-sheet"])
def test_hits_say_where_they_come_from(app_and_server, query: str, needle: str, fields: dict, place: str) -> None:
    app, server = app_and_server
    answer = app.search(query, top_k=5)
    via_service = _hit(answer.wire()["results"], needle)
    via_mcp = _hit(_mcp(server, "query_documents", {"query": query, "topK": 5})["results"], needle)
    for hit in (via_service, via_mcp):
        assert {k: hit.get(k) for k in fields} == fields
        assert hit["startLine"] is None
        assert "<!-- Page number" not in hit["text"] and "<!-- Sheet name" not in hit["text"]
    assert hit_place(next(h for h in answer.results if needle in h.text)) == place
    around = _mcp(server, "read_chunk_neighbors", {"filePath": via_mcp["filePath"],
                                                  "chunkIndex": via_mcp["chunkIndex"], "before": 1, "after": 1})
    same = [c for c in around["chunks"] if c["chunkIndex"] == via_mcp["chunkIndex"]]
    assert {k: same[0].get(k) for k in fields} == fields


def test_pdf_pages_each_start_their_own_chunks(app_and_server) -> None:
    """A chunk never runs over a page break, and the rebuilt document has no page markers."""
    app, _ = app_and_server
    hit = _hit(app.search("zebra quartz phrase", top_k=5).wire()["results"], "zebra quartz")
    assert "harbour" not in hit["text"] and "garden" not in hit["text"]
    doc = app.read(hit["filePath"])
    assert "<!-- Page number" not in doc.content and "zebra quartz" in doc.content
