"""Replies sized for an agent (issue 30, Found 5 and 7), through fastmcp's in-memory client.

query_documents' default reply carries each hit's section only around the hit (`sections`
"excerpt"); "full" gives whole sections, "none" none. A file indexed and then deleted from
disk is listed with a displayPath like every other file. The hashed-word embedder stands in
for the model: these are reply shapes, not rankings (scripts/bench_answers.py measures sizes
and how often the answer stays in the reply, with the real model).
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jsonschema
from fastmcp import Client

from appliance.assemble.passages import EXCERPT_CONTEXT_CHARS, section_excerpt
from appliance.ingest.chunk import chunk_document
from tests.fixtures.mcp_calls import error, ok, serve

FILLER = [f"Sentence {n} describes the routine maintenance of pump number {n} in plain words." for n in range(40)]
MARKER = "The QUOKKA_VALVE_314 must be closed by hand before winter."


def long_section() -> str:
    """One heading, then ~3,500 characters with the marker in the middle: one section, many chunks."""
    return "# Pump handbook\n\n" + " ".join([*FILLER[:20], MARKER, *FILLER[20:]]) + "\n"


def test_an_excerpt_keeps_the_hit_and_its_surroundings_and_marks_the_cuts() -> None:
    chunks = chunk_document(long_section(), count_tokens=lambda t: len(t.split()), budget=40, title="Pumps")
    assert len({c.section for c in chunks}) == 1 and len(chunks) > 5
    hit = next(c for c in chunks if "QUOKKA_VALVE_314" in c.text)
    whole, cut = section_excerpt(chunks, None)
    assert not cut and MARKER in whole
    excerpt, cut = section_excerpt(chunks, {hit.index})
    assert cut and f"[hit chunk {hit.index}]" in excerpt and MARKER not in excerpt  # the hit is in results
    before = whole[:whole.index(hit.body.strip()[:60])].rstrip()
    assert before[-100:] in excerpt  # what leads up to the hit
    assert excerpt.startswith("[...] ") and excerpt.endswith(" [...]") and "# Pump handbook" not in excerpt
    assert len(excerpt) <= 2 * EXCERPT_CONTEXT_CHARS + len(f"[hit chunk {hit.index}]") + 14
    everything, cut = section_excerpt(chunks, {c.index for c in chunks})
    assert cut and everything.count("[hit chunk") == len(chunks) and "Sentence" not in everything


def test_query_documents_sections_excerpt_full_and_none(tmp_path: Path) -> None:
    server, docs = serve(tmp_path, CHUNK_TOKEN_BUDGET="40")
    (docs / "pumps.md").write_text(long_section(), "utf-8")
    (docs / "gone.md").write_text("# Gone\n\nThis note is deleted after the sync.\n", "utf-8")
    ok(server, "ingest_file", {"filePath": str(docs / "pumps.md")})
    ok(server, "ingest_file", {"filePath": str(docs / "gone.md")})
    (docs / "gone.md").unlink()

    query = {"query": "QUOKKA_VALVE_314 closed by hand", "topK": 1}
    default = ok(server, "query_documents", query)
    (hit,) = default["results"]
    assert default["sections"] == "excerpt" and default["excerpted"] == [hit["parentId"]]
    excerpt = default["parents"][hit["parentId"]]
    assert MARKER in hit["text"] and f"[hit chunk {hit['chunkIndex']}]" in excerpt and "[...]" in excerpt
    full = ok(server, "query_documents", query | {"sections": "full"})
    whole = full["parents"][hit["parentId"]]
    assert full["sections"] == "full" and full["excerpted"] is None
    assert all(sentence in whole for sentence in FILLER) and len(excerpt) < len(whole) / 2
    none = ok(server, "query_documents", query | {"sections": "none"})
    assert none["parents"] == {} and none["results"] == default["results"]
    assert error(server, "query_documents", query | {"sections": "all"})["code"] == "invalid_argument"

    listed = ok(server, "list_files")
    (missing,) = [f for f in listed["files"] if f["state"] == "missing"]
    assert missing["displayPath"] == "gone.md" and missing["filePath"] == str(docs / "gone.md")

    async def schemas() -> dict[str, Any]:
        async with Client(server) as client:
            return {t.name: t.output_schema for t in await client.list_tools()}

    tools = asyncio.run(schemas())
    for data in (default, full, none):
        jsonschema.validate(data, tools["query_documents"])
    jsonschema.validate(listed, tools["list_files"])


def test_the_status_page_prints_a_hits_heading_once() -> None:
    """The page shows a hit's heading above its passage; the chunk's text starts with the same heading path."""
    from appliance.adapters.status_page import page_passage
    from appliance.results import Hit

    md = "# Flux manual\n\n## Power\n\nThe flux capacitor needs 1.21 gigawatts.\n\n## Safety\n\nWear gloves.\n"
    chunk = chunk_document(md, count_tokens=lambda t: len(t.split()), budget=40, title="Flux")[0]
    hit = Hit(source="/d/flux.md", source_kind="file", display_path="flux.md", chunk_index=0,
              heading=chunk.heading, text=chunk.text)
    assert chunk.heading == "Flux manual > Power" and chunk.text.startswith(chunk.heading + "\n")
    shown = page_passage(hit)
    assert chunk.heading not in shown and "1.21 gigawatts" in shown
    assert page_passage(hit.model_copy(update={"heading": None, "text": "plain"})) == "plain"
