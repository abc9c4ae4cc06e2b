#!/usr/bin/env python3
"""Record what clients see (every MCP tool's results and the CLI's `--json` output) as one JSON file.

Usage: capture_wire.py --out wire.json [--index DIR]   index a small fixture folder, call every tool, record
       capture_wire.py --compare old.json new.json   0 differences, or what differs (exit 1)

A regression check for changes that must not move the wire: the fixture folder (Markdown with
front matter, text, a Russian note, a long document, a copied passage, a PDF, a PPTX, an XLSX,
an ignored file) is indexed under a fixed path, then every tool is called through fastmcp's
in-memory client (paging with cursors, line and page ranges, argument and service errors) and the
CLI runs its `--json` commands. Values that differ from run to run (timings, timestamps, job ids,
process ids) are replaced by "<volatile>"; the rest must be equal.

`--compare` compares the results by value (JSON objects unordered) and, separately, counts
results whose keys come in another order; it also checks the new tool list against the old one:
every captured result (old and new) validates against the new output schema (jsonschema), and
every property name with its description in an old output schema is still in the new one.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORK = Path("/tmp/minirag-wire-capture")
DOCS = WORK / "docs"
DB = WORK / "db"
SHARED = Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared")) / "corpus"
MODELS = Path(os.environ.get("MODELS_DIR", ROOT / "models" / "baked")).resolve()
"""Resolved, so a copy of the checkout whose models/baked links to the same folder reports the same path."""
VOLATILE = {"seconds", "startedAt", "finishedAt", "elapsedSeconds", "ingestedAt", "updatedAt", "jobId", "pid",
            "started_at", "finished_at", "ingested_at", "created_at", "filesPerSecond", "etaSeconds", "lastSync"}

PASSAGE = ("The calibration of the flux controller must be repeated after every firmware update, because the "
           "update resets the thermal offsets that the controller learned during its first week of service.")
FILES = {
    "guide/errors.md": ("---\ntitle: Error catalogue\ntype: manual\n---\n# Error catalogue\n\n## Flux controller\n\n"
                        "The code ERR_ZORBLATT_7741 means the flux controller overheated during calibration.\n"
                        "Let it cool for ten minutes, then restart the calibration from the service menu.\n\n"
                        f"{PASSAGE}\n\n## Network\n\nERR_NET_12 means the uplink cable is unplugged.\n"),
    "guide/copy.md": f"# Notes copied from the manual\n\n{PASSAGE}\n\nNothing else here.\n",
    "guide/vacation.md": ("# Vacation policy\n\nEmployees receive twenty-eight days of paid vacation per year.\n"
                          "Unused days carry over until the end of March of the following year.\n"),
    "ru/pogoda.md": ("# Погода в Новосибирске\n\nЗимой в Новосибирске морозы достигают минус сорока градусов.\n"
                     "Летом бывает жарко, до тридцати пяти градусов.\n"),
    "notes/recipe.txt": "Pancakes: flour, milk, two eggs, a pinch of salt.\nFry on a hot pan.\n",
    "notes/long.md": "# A long document\n\n" + "".join(
        f"## Part {i}\n\nParagraph {i} talks about harbour number {i} and the boats that moor there "
        f"every season; line {i} of the long document.\n\n" for i in range(1, 120)),
    "private/secret.md": "# Hidden\n\nThe password is hunter2 and ERR_ZORBLATT_7741 appears here too.\n",
    ".indexignore": "private/\n",
}
COPIES = {"markitdown/test.pptx": "office/test.pptx", "markitdown/test.xlsx": "office/test.xlsx",
          "markitdown/REPAIR-2022-INV-001_multipage.pdf": "office/repair.pdf"}


def volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "<volatile>" if k in VOLATILE and v is not None else volatile(v) for k, v in value.items()}
    if isinstance(value, list):
        return [volatile(v) for v in value]
    return value


def build_docs() -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    DOCS.mkdir(parents=True)
    for rel, text in FILES.items():
        (DOCS / rel).parent.mkdir(parents=True, exist_ok=True)
        (DOCS / rel).write_text(text, "utf-8")
    for src, dst in COPIES.items():
        (DOCS / dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SHARED / src, DOCS / dst)


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME", "MCP_INSTRUCTIONS_EXTRA")}
    return out | {"BASE_DIR": str(DOCS), "DB_PATH": str(DB), "MODELS_DIR": str(MODELS), "PYTHONPATH": str(ROOT)}


def cli(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "appliance", *args], env=env(), capture_output=True, text=True,
                          timeout=900)
    try:
        out: Any = json.loads(done.stdout)
    except ValueError:
        out = done.stdout
    return {"args": list(args), "rc": done.returncode, "stdout": volatile(out)}


def tool_calls(docs: Path) -> list[tuple[str, dict[str, Any]]]:
    errors, long, pdf, pptx = str(docs / "guide/errors.md"), str(docs / "notes/long.md"), \
        str(docs / "office/repair.pdf"), str(docs / "office/test.pptx")
    return [
        ("status", {}),
        ("list_roots", {}),
        ("sync_status", {}),
        ("sync_status", {"jobId": "nope"}),
        ("list_files", {}),
        ("list_files", {"limit": 3}),
        ("list_files", {"scope": str(docs / "guide")}),
        ("list_files", {"scope": "/elsewhere"}),
        ("list_files", {"cursor": "garbage"}),
        ("query_documents", {"query": "ERR_ZORBLATT_7741"}),
        ("query_documents", {"query": "flux controller calibration firmware"}),
        ("query_documents", {"query": "how many vacation days", "topK": 3}),
        ("query_documents", {"query": "морозы зимой"}),
        ("query_documents", {"query": "harbour boats", "topK": 25}),
        ("query_documents", {"query": "repair invoice", "scope": str(docs / "office")}),
        ("query_documents", {"query": "calibration", "docClass": "manual"}),
        ("query_documents", {"query": "calibration", "docClass": "nosuchclass"}),
        ("query_documents", {"query": "flux controller", "format": "markdown"}),
        ("query_documents", {"query": "harbour boats", "format": "markdown", "contextLines": 0, "topK": 5}),
        ("query_documents", {"query": "slide title"}),
        ("query_documents", {"query": "sheet numbers"}),
        ("query_documents", {"query": ""}),
        ("query_documents", {"query": "x", "topK": 0}),
        ("query_documents", {"query": "x", "scope": "/outside/roots"}),
        ("read_file", {"filePath": errors}),
        ("read_file", {"filePath": long, "maxChars": 1000}),
        ("read_file", {"filePath": long, "startLine": 10, "endLine": 30}),
        ("read_file", {"filePath": long, "startLine": 100000}),
        ("read_file", {"filePath": long, "startLine": 5, "endLine": 2}),
        ("read_file", {"filePath": pdf}),
        ("read_file", {"filePath": pdf, "pageStart": 2}),
        ("read_file", {"filePath": pdf, "pageStart": 1, "pageEnd": 1}),
        ("read_file", {"filePath": pdf, "startLine": 1}),
        ("read_file", {"filePath": pptx, "pageStart": 2, "pageEnd": 3}),
        ("read_file", {"filePath": str(docs / "office/test.xlsx")}),
        ("read_file", {"filePath": str(docs / "office/test.xlsx"), "pageStart": 1}),
        ("read_file", {"filePath": str(docs / "nope.md")}),
        ("read_file", {"filePath": "relative.md"}),
        ("read_file", {"filePath": errors, "source": "x"}),
        ("read_file", {"filePath": long, "offset": 1000, "revision": "not-the-revision"}),
        ("read_chunk_neighbors", {"filePath": long, "chunkIndex": 3}),
        ("read_chunk_neighbors", {"filePath": long, "chunkIndex": 0, "before": 0, "after": 50, "maxChars": 1000}),
        ("read_chunk_neighbors", {"filePath": pdf, "chunkIndex": 1}),
        ("read_chunk_neighbors", {"filePath": pptx, "chunkIndex": 1, "before": 1, "after": 1}),
        ("read_chunk_neighbors", {"filePath": long, "chunkIndex": 100000}),
        ("read_chunk_neighbors", {"chunkIndex": 0}),
        ("grep", {"pattern": "ERR_"}),
        ("grep", {"pattern": "err_[a-z]+_\\d+", "regex": True}),
        ("grep", {"pattern": "err_", "caseSensitive": True}),
        ("grep", {"pattern": "harbour", "maxResults": 5}),
        ("grep", {"pattern": "Part", "fileGlob": "*.md", "scope": str(docs / "notes"), "maxResults": 3}),
        ("grep", {"pattern": "flux", "root": "docs"}),
        ("grep", {"pattern": "a", "root": "nosuchroot"}),
        ("grep", {"pattern": "(unclosed", "regex": True}),
        ("grep", {"pattern": "invoice"}),
        ("grep", {"pattern": "Морозы"}),
        ("ingest_data", {"content": "# Meeting\n\nWe agreed on the ZEPHYR_99 launch date.\n", "source": "meeting-1",
                         "title": "Meeting one"}),
        ("ingest_data", {"content": "plain text item about ZEPHYR_99", "source": "plain-1", "format": "text"}),
        ("ingest_data", {"content": "<h1>Page</h1><p>ZEPHYR_99 in html</p>", "source": "html-1", "format": "html"}),
        ("ingest_data", {"content": "x", "source": "/absolute"}),
        ("ingest_url", {"url": "https://example.com/"}),
        ("query_documents", {"query": "ZEPHYR_99 launch"}),
        ("grep", {"pattern": "ZEPHYR_99"}),
        ("read_file", {"source": "meeting-1"}),
        ("read_file", {"source": "meeting-1", "startLine": 1, "endLine": 2}),
        ("read_chunk_neighbors", {"source": "meeting-1", "chunkIndex": 0}),
        ("list_files", {"limit": 500}),
        ("list_roots", {}),
        ("delete_file", {"source": "plain-1"}),
        ("delete_file", {"source": "plain-1"}),
        ("delete_file", {"filePath": str(docs / "notes/recipe.txt")}),
        ("list_files", {"scope": str(docs / "notes")}),
        ("ingest_file", {"filePath": str(docs / "notes/recipe.txt")}),
        ("ingest_file", {"filePath": str(docs / "private/secret.md")}),
        ("ingest_file", {"filePath": str(docs / "nope.txt")}),
        ("no_such_tool", {}),
    ]


async def mcp_capture() -> dict[str, Any]:
    from fastmcp import Client

    from appliance.adapters.mcp_server import Runtime, create_server
    from appliance.config import read_environment

    runtime = Runtime(read_environment({"BASE_DIR": str(DOCS), "DB_PATH": str(DB), "MODELS_DIR": str(MODELS)}))
    server = create_server(runtime)
    calls: list[dict[str, Any]] = []
    async with Client(server) as client:
        tools = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema,
                  "outputSchema": t.output_schema, "annotations": t.annotations.model_dump() if t.annotations else None}
                 for t in await client.list_tools()]

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            try:
                result = await client.call_tool(name, args, raise_on_error=False)
            except Exception as exc:  # noqa: BLE001 (an unknown tool is a protocol error, recorded as such)
                return {"tool": name, "args": args, "exception": type(exc).__name__, "message": str(exc)}
            texts = []
            for c in result.content:
                text = getattr(c, "text", None)
                try:
                    texts.append(volatile(json.loads(text)) if text is not None else None)
                except ValueError:
                    texts.append(text)
            return {"tool": name, "args": args, "isError": result.is_error,
                    "structured": volatile(result.structured_content), "text": texts}

        for name, args in tool_calls(DOCS):
            calls.append(await call(name, args))
        # every page of a listing, by its cursors
        cursor, pages = None, 0
        while pages < 50:
            args = {"limit": 2} | ({"cursor": cursor} if cursor else {})
            page = await call("list_files", args)
            calls.append(page)
            cursor, pages = (page["structured"] or {}).get("nextCursor"), pages + 1
            if not cursor:
                break
        # every page of a long document, by nextOffset and revision
        offset, revision, pages = 0, None, 0
        while offset is not None and pages < 50:
            args = {"filePath": str(DOCS / "notes/long.md"), "maxChars": 1500, "offset": offset} \
                | ({"revision": revision} if revision else {})
            page = await call("read_file", args)
            calls.append(page)
            data = page["structured"] or {}
            offset, revision, pages = data.get("nextOffset"), data.get("revision"), pages + 1
        # a sync job, followed to its end
        raw = await client.call_tool("sync_start", {}, raise_on_error=False)
        job_id = None if raw.is_error else (raw.structured_content or {}).get("jobId")
        calls.append({"tool": "sync_start", "args": {}, "isError": raw.is_error,
                      "structured": volatile(raw.structured_content),
                      "text": [volatile(json.loads(c.text)) for c in raw.content]})
        if job_id:
            for _ in range(600):
                result = await client.call_tool("sync_status", {"jobId": job_id}, raise_on_error=False)
                if (result.structured_content or {}).get("finishedAt"):
                    break
                await asyncio.sleep(0.2)
            calls.append({"tool": "sync_status", "args": {"jobId": "<the job>"}, "isError": result.is_error,
                          "structured": volatile(result.structured_content),
                          "text": [volatile(json.loads(c.text)) for c in result.content]})
        calls.append(await call("sync_status", {}))
        calls.append(await call("status", {}))
    return {"tools": tools, "calls": calls}


def cli_capture() -> list[dict[str, Any]]:
    errors, long, pdf = str(DOCS / "guide/errors.md"), str(DOCS / "notes/long.md"), str(DOCS / "office/repair.pdf")
    return [
        cli("query", "flux controller calibration", "--json"),
        cli("query", "ERR_ZORBLATT_7741", "--top-k", "3", "--json"),
        cli("query", "flux controller", "--markdown", "--json"),
        cli("query", "", "--json"),
        cli("read", errors, "--json"),
        cli("read", long, "--max-chars", "1000", "--json"),
        cli("read", long, "--start-line", "3", "--end-line", "9", "--json"),
        cli("read", pdf, "--page-start", "1", "--page-end", "1", "--json"),
        cli("read", "--source", "meeting-1", "--json"),
        cli("read", str(DOCS / "nope.md"), "--json"),
        cli("read-neighbors", "--file-path", long, "--chunk-index", "2", "--json"),
        cli("list", "--json"),
        cli("list", "--ignored", "--limit", "3", "--json"),
        cli("list", "--scope", str(DOCS / "guide"), "--json"),
        cli("status", "--json"),
        cli("grep", "ERR_", "--json"),
        cli("grep", "err_[a-z]+", "--regex", "--json"),
        cli("roots", "--json"),
        cli("delete", "--source", "html-1", "--json"),
        cli("delete", "--source", "html-1", "--json"),
        cli("ingest", str(DOCS / "guide/vacation.md"), "--json"),
        cli("sync", "--json"),
    ]


def capture(out: Path, index: Path | None) -> None:
    """Capture into `out`. With `index`: the fixture folder indexed once is kept there (the first run)
    and every later run starts from that copy, so the stored vectors are the same bytes in every run
    (a sync embeds in batches whose makeup depends on timing, which moves distances by ~1e-3)."""
    if index is not None and (index / "sync.json").is_file():
        shutil.rmtree(WORK, ignore_errors=True)
        shutil.copytree(index / "work", WORK, symlinks=True)
        first_sync = json.loads((index / "sync.json").read_text("utf-8"))
    else:
        build_docs()
        first_sync = cli("sync", "--json")
        if index is not None:
            from appliance.assemble.paging import cursor_key

            cursor_key(DB)  # kept with the copy: list_files' cursors are signed alike in every run
            shutil.rmtree(index, ignore_errors=True)
            shutil.copytree(WORK, index / "work", symlinks=True)
            (index / "sync.json").write_text(json.dumps(first_sync, ensure_ascii=False), "utf-8")
    mcp = asyncio.run(mcp_capture())
    data = {"sync": first_sync, "mcp": mcp, "cli": cli_capture()}
    out.write_text(json.dumps(data, ensure_ascii=False, indent=1), "utf-8")
    print(f"{out}: {len(mcp['calls'])} tool calls, {len(data['cli']) + 1} CLI commands, {len(mcp['tools'])} tools")


def _order(value: Any) -> Any:
    """Every object's keys in order, recursively (to tell an order-only difference)."""
    if isinstance(value, dict):
        return [[k, _order(v)] for k, v in value.items()]
    if isinstance(value, list):
        return [_order(v) for v in value]
    return value


def _described(schema: Any, out: set[tuple[str, str | None]]) -> set[tuple[str, str | None]]:
    """(property name, its description) for every property anywhere in a JSON schema."""
    if isinstance(schema, dict):
        for name, prop in (schema.get("properties") or {}).items():
            out.add((name, prop.get("description") if isinstance(prop, dict) else None))
        for value in schema.values():
            _described(value, out)
    elif isinstance(schema, list):
        for value in schema:
            _described(value, out)
    return out


def _revive(value: Any, key: str = "") -> Any:
    """A volatile value back as one of its type, to validate the result."""
    if value == "<volatile>":
        return {"jobId": "job", "lastSync": {}}.get(key, 1)
    if isinstance(value, dict):
        return {k: _revive(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_revive(v) for v in value]
    return value


def compare(old_path: Path, new_path: Path) -> int:
    old, new = (json.loads(p.read_text("utf-8")) for p in (old_path, new_path))
    for capture_ in (old, new):  # again, so a capture made before a key was known volatile compares too
        capture_["sync"], capture_["cli"] = volatile(capture_["sync"]), volatile(capture_["cli"])
        capture_["mcp"]["calls"] = volatile(capture_["mcp"]["calls"])
    problems: list[str] = []
    order_only = 0
    pairs = [("sync", old["sync"], new["sync"])]
    pairs += [(f"mcp {a.get('tool')} {json.dumps(a.get('args'))[:120]}", a, b)
              for a, b in zip(old["mcp"]["calls"], new["mcp"]["calls"], strict=False)]
    pairs += [(f"cli {' '.join(a['args'])[:120]}", a, b) for a, b in zip(old["cli"], new["cli"], strict=False)]
    if len(old["mcp"]["calls"]) != len(new["mcp"]["calls"]) or len(old["cli"]) != len(new["cli"]):
        problems.append("the number of calls differs")
    for label, a, b in pairs:
        if a != b:
            problems.append(f"{label}: differs\n  old: {json.dumps(a, ensure_ascii=False)[:1500]}\n"
                            f"  new: {json.dumps(b, ensure_ascii=False)[:1500]}")
        elif _order(a) != _order(b):
            order_only += 1
    old_tools = {t["name"]: t for t in old["mcp"]["tools"]}
    new_tools = {t["name"]: t for t in new["mcp"]["tools"]}
    if sorted(old_tools) != sorted(new_tools):
        problems.append(f"tool names differ: {sorted(old_tools)} != {sorted(new_tools)}")
    for name, tool in old_tools.items():
        fresh = new_tools.get(name)
        if fresh is None:
            continue
        for key in ("description", "inputSchema", "annotations"):
            if tool[key] != fresh[key]:
                problems.append(f"tool {name}: {key} differs")
        missing = _described(tool["outputSchema"], set()) - _described(fresh["outputSchema"], set())
        for prop, description in sorted(missing, key=str):
            problems.append(f"tool {name}: output schema lost {prop!r} described {description!r}")
    validated = 0
    try:
        import jsonschema
    except ImportError:
        problems.append("jsonschema is not installed: results not validated against the output schemas")
    else:
        for capture_ in (old, new):
            for call in capture_["mcp"]["calls"]:
                schema = (new_tools.get(call.get("tool")) or {}).get("outputSchema")
                if schema is None or call.get("structured") is None:
                    continue
                data = _revive(call["structured"])
                try:
                    jsonschema.validate(data, schema)
                    validated += 1
                except jsonschema.ValidationError as exc:
                    problems.append(f"{call['tool']} {json.dumps(call['args'])[:100]}: does not validate against "
                                    f"the new output schema: {exc.message[:300]} at {list(exc.absolute_path)}")
    for problem in problems:
        print(problem)
    print(f"{len(pairs)} results compared: {len(problems)} problems; {order_only} equal but with keys in another "
          f"order; {validated} results validated against the new output schemas")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="capture into this file")
    parser.add_argument("--index", type=Path, help=(
        "keep the indexed fixture folder here on the first run and start every later run from it "
        "(compare captures made with the same --index: a fresh sync's vectors vary slightly)"))
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        parser.error("give --out or --compare")
    capture(args.out, args.index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
