"""Every tool's result, answer or error, validates against the output schema tools/list gives for it.

The schemas are the JSON schemas of the service's records (appliance.results) and the results are the
records' own wire form: this keeps the two from drifting apart, tool by tool, as a client sees them.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jsonschema
from fastmcp import Client

from tests.fixtures.mcp_calls import THRESHOLD, big_note, serve

FAILING_PDF = b"%PDF-1.4 not really a pdf"


def _calls(docs: Path) -> list[tuple[str, dict[str, Any]]]:
    notes, deck = str(docs / "notes.md"), str(docs / "broken.pdf")
    return [
        ("status", {}), ("list_roots", {}), ("list_files", {"limit": 1}), ("list_files", {}),
        ("sync_start", {}),
        ("sync_status", {}), ("sync_status", {"jobId": "nope"}), ("sync_cancel", {"jobId": "nope"}),
        ("ingest_file", {"filePath": notes}), ("ingest_file", {"filePath": deck}),
        ("ingest_data", {"source": "small", "content": "# Small\n\nSMALL_TOKEN_11 here.\n"}),
        ("ingest_data", {"source": "big", "content": big_note("BIG_TOKEN_22", 4 * THRESHOLD)}),
        ("ingest_url", {"url": "https://example.org/page"}),
        ("query_documents", {"query": "flux controller calibration"}),
        ("query_documents", {"query": "Kalibrierung des Flussreglers", "explain": True}),
        ("query_documents", {"query": "flux controller", "sections": "full"}),
        ("query_documents", {"query": "flux", "format": "markdown"}), ("query_documents", {"query": "x", "topK": 0}),
        ("read_file", {"filePath": notes}), ("read_file", {"filePath": notes, "startLine": 1, "endLine": 2}),
        ("read_file", {"source": "small"}), ("read_file", {"filePath": str(docs / "nope.md")}),
        ("read_chunk_neighbors", {"filePath": notes, "chunkIndex": 0}),
        ("grep", {"pattern": "ERR_"}), ("grep", {"pattern": "(unclosed", "regex": True}),
        ("delete_file", {"source": "small"}), ("delete_file", {"source": "small"}),
    ]


def test_every_tool_result_validates_against_its_output_schema(tmp_path: Path) -> None:
    server, docs = serve(tmp_path)
    (docs / "notes.md").write_text("# Flux\n\nERR_FLUX_1 means the flux controller needs calibration.\n\n"
                                   "## More\n\nERR_NET_2 means the cable is out.\n", "utf-8")
    (docs / "broken.pdf").write_bytes(FAILING_PDF)

    async def run() -> list[tuple[str, dict[str, Any], Any, dict[str, Any]]]:
        async with Client(server) as client:
            schemas = {t.name: t.output_schema for t in await client.list_tools()}
            out = []
            for name, args in _calls(docs):
                result = await client.call_tool(name, args, raise_on_error=False)
                out.append((name, args, result, schemas[name]))
                if name == "sync_start" and not result.is_error:  # the finished job, with its counts and failures
                    job = result.structured_content
                    while job.get("finishedAt") is None:
                        await asyncio.sleep(0.1)
                        job = (await client.call_tool("sync_status", {"jobId": job["jobId"]})).structured_content
                    out.append(("sync_status", {"jobId": job["jobId"]}, job, schemas["sync_status"]))
            return out

    answers = []
    for name, _args, result, schema in asyncio.run(run()):
        data = result if isinstance(result, dict) else result.structured_content
        jsonschema.validate(data, schema)  # raises, naming the property, when a result and its schema disagree
        answers.append((name, data))
    assert len({name for name, _data in answers}) == 14  # every tool
    assert any(data.get("error") for _name, data in answers) and any(data.get("trimmed", 0) is None
                                                                      for _name, data in answers)
    failed = [data for name, data in answers if name in ("sync_status", "ingest_file") and
              (data.get("failures") or data.get("failed"))]
    assert failed, "a failed file's entry was validated, in a job and in a report"
