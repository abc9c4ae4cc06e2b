"""Bounded ingests, delete_file's path rule and list_files paging, through fastmcp's in-memory client.

A deterministic fake embedder (hashed words) stands in for the model so the plumbing
tests run in seconds; one test repeats the large-ingest path with the real model.
Nothing here is timed: ingest speed is measured by scripts/bench_ingest_data.py.
"""
from __future__ import annotations

import asyncio
import base64
import random
import re
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from appliance.adapters import mcp_server as server_module
from appliance.ingest import fetch
from tests.fixtures.http_fakes import PUBLIC_IP, FakeResolver, page
from tests.fixtures.mcp_calls import THRESHOLD, big_note, call, error, ok, serve, wait_for


def read_all(server: Any, args: dict[str, Any]) -> str:
    """Every page of read_file, joined (the default page is 20,000 characters)."""
    doc = ok(server, "read_file", args)
    parts = [doc["content"]]
    while doc["nextOffset"] is not None:
        doc = ok(server, "read_file", {**args, "offset": doc["nextOffset"], "revision": doc["revision"]})
        parts.append(doc["content"])
    return "".join(parts)


# ------------------------------------------------------------------ bounded ingest_data

def test_ingest_data_above_the_threshold_becomes_a_job_that_sync_status_follows(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path)
    content = big_note("GEARBOX_QX_5521", 40 * THRESHOLD)
    job = ok(server, "ingest_data", {"source": "big-notes", "content": content})
    assert job["kind"] == "ingest_data" and job["source"] == "big-notes" and job["jobId"]
    assert job["phase"] in ("queued", "indexing", "succeeded") and "seen" not in job
    done = wait_for(server, job)
    assert done["phase"] == "succeeded", done
    assert done["counts"]["added"] == 1 and done["counts"]["chunks"] > 1 and done["error"] is None
    assert done["filesDone"] == done["filesTotal"] == 1
    assert read_all(server, {"source": "big-notes"}).count("GEARBOX_QX_5521") == content.count("GEARBOX_QX_5521")
    hits = ok(server, "query_documents", {"query": "GEARBOX_QX_5521", "topK": 3})["results"]
    assert hits and hits[0]["source"] == "big-notes"
    again = wait_for(server, ok(server, "ingest_data", {"source": "big-notes", "content": content + " more"}))
    assert again["counts"]["updated"] == 1
    assert ok(server, "status")["config"]["ingestForegroundMaxBytes"] == THRESHOLD


def test_ingest_data_at_or_below_the_threshold_answers_with_the_report(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path)
    report = ok(server, "ingest_data", {"source": "small", "content": big_note("SMALL_ZX_1", THRESHOLD)})
    assert report["seen"] == report["added"] == 1 and report["chunks"] >= 1 and "jobId" not in report
    assert ok(server, "read_file", {"source": "small"})["content"].startswith("# Notes")


def test_ingest_data_checks_its_arguments_before_any_job(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path, MAX_FILE_SIZE=str(10 * THRESHOLD))
    too_big = error(server, "ingest_data", {"source": "huge", "content": "x" * (10 * THRESHOLD + 1)})
    assert too_big["code"] == "invalid_argument" and "MAX_FILE_SIZE" in too_big["message"]
    bad_id = error(server, "ingest_data", {"source": "/abs", "content": big_note("X", 3 * THRESHOLD)})
    assert bad_id["code"] == "invalid_argument"
    assert error(server, "sync_status", {"jobId": "nope"})["code"] == "not_found"


def test_ingest_output_schema_admits_the_report_and_the_job(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path)

    async def listed() -> dict[str, Any]:
        async with Client(server) as client:
            return {t.name: t for t in await client.list_tools()}

    tools = asyncio.run(listed())
    for name in ("ingest_data", "ingest_url"):
        required = set(_required(tools[name].output_schema))
        assert {"seen", "jobId", "error"} <= required, (name, required)
        assert "sync_status" in tools[name].description
    assert "ingest" in tools["sync_status"].description
    assert tools["list_files"].input_schema["properties"]["limit"]["maximum"] == 5000


def _required(schema: Any) -> list[str]:
    """Every property name some part of a (possibly dereferenced) JSON schema requires."""
    if isinstance(schema, dict):
        return list(schema.get("required", [])) + [n for v in schema.values() for n in _required(v)]
    if isinstance(schema, list):
        return [n for v in schema for n in _required(v)]
    return []


# ------------------------------------------------------------------ bounded ingest_url

def test_ingest_url_embeds_a_large_page_in_a_job_and_refuses_at_once(tmp_path: Path, public: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(fetch.fetch_url.__kwdefaults__, "resolver", FakeResolver({"public.test": [PUBLIC_IP]}))
    monkeypatch.setitem(fetch.fetch_url.__kwdefaults__, "treat_as_public", (PUBLIC_IP,))
    server, _docs = serve(tmp_path, ALLOW_URL_INGEST="1")
    body = "".join(f"<p>Paragraph {n} on the WINDMILLKX3 gearbox and its bearings.</p>" for n in range(200))
    public.routes["/big"] = page(f"<title>Windmills</title>{body}".encode())
    public.routes["/small"] = page(b"<title>Short</title><p>one short page about kites</p>")
    big, small = (f"http://public.test:{public.port}/{name}" for name in ("big", "small"))
    job = ok(server, "ingest_url", {"url": big})
    assert job["kind"] == "ingest_url" and job["source"] == big, job
    assert wait_for(server, job)["counts"]["added"] == 1
    assert read_all(server, {"source": big}).count("WINDMILLKX3") == 200
    report = ok(server, "ingest_url", {"url": small})
    assert report["added"] == 1 and "jobId" not in report
    refused = error(server, "ingest_url", {"url": "http://127.0.0.1/admin"})  # refused before any job
    assert refused["code"] == "url_refused"


# ------------------------------------------------------------------ delete_file takes absolute paths only

@pytest.mark.parametrize("target", ["notes.md", "sub/notes.md", "./notes.md", "https://example.org/page"])
def test_file_tools_refuse_relative_paths(tmp_path: Path, target: str) -> None:
    server, docs = serve(tmp_path)
    (docs / "notes.md").write_text("# Notes\n", "utf-8")
    for tool, args in (("delete_file", {"filePath": target}), ("read_file", {"filePath": target}),
                       ("read_chunk_neighbors", {"filePath": target, "chunkIndex": 0})):
        err = error(server, tool, args)
        assert err["code"] == "invalid_argument" and "must be absolute" in err["message"], (tool, err)
    assert error(server, "delete_file", {"source": "notes.md"})["code"] == "not_found"


def test_delete_file_by_source_id_still_works(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path)
    ok(server, "ingest_data", {"source": "notes.md", "content": "plain words"})
    assert ok(server, "delete_file", {"source": "notes.md"})["deleted"] is True


# ------------------------------------------------------------------ list_files pages

def test_list_files_pages_return_every_entry_once(tmp_path: Path) -> None:
    server, docs = serve(tmp_path)
    for n in range(1200):
        sub = docs / f"d{n % 7}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{n:05}.md").write_text(f"file {n}\n", "utf-8")
    for name in ("note-a", "note-b", "note-c"):
        ok(server, "ingest_data", {"source": name, "content": f"content of {name}"})
    seen_files: list[str] = []
    seen_sources: list[str] = []
    cursor, pages = None, 0
    while True:
        page = ok(server, "list_files", {"limit": 500, **({"cursor": cursor} if cursor else {})})
        pages += 1
        assert len(page["files"]) + len(page["sources"]) <= 500
        files_now = 1200 if pages == 1 else 1201  # totals describe the listing as of each call
        assert page["total"] == files_now + 3 and page["totalFiles"] == files_now and page["totalSources"] == 3
        seen_files += [f["filePath"] for f in page["files"]]
        seen_sources += [s["source"] for s in page["sources"]]
        if pages == 1:  # a file added mid-walk that sorts after the cursor shows up; nothing repeats
            (docs / "zz-late.md").write_text("late\n", "utf-8")
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen_files == sorted(seen_files) and len(seen_files) == len(set(seen_files)) == 1201
    assert set(seen_files) == {str(p) for p in docs.rglob("*.md")}
    assert seen_sources == ["note-a", "note-b", "note-c"]
    # The largest page a client may ask for still ends at the reply budget, and goes on from its cursor.
    from appliance.assemble.paging import REPLY_BUDGET_CHARS

    walked, cursor, pages = [], None, 0
    while True:
        result = call(server, "list_files", {"limit": 5000, **({"cursor": cursor} if cursor else {})})
        assert not result.is_error and len(result.content[0].text) <= REPLY_BUDGET_CHARS
        walked += [f["filePath"] for f in result.structured_content["files"]]
        pages += 1
        cursor = result.structured_content["nextCursor"]
        if cursor is None:
            break
    assert pages > 1 and walked == sorted(set(walked)) and len(walked) == 1201


def test_list_files_refuses_a_bad_cursor_or_limit(tmp_path: Path) -> None:
    server, docs = serve(tmp_path)
    for n in range(5):
        (docs / f"f{n}.md").write_text("x\n", "utf-8")
    first = ok(server, "list_files", {"limit": 2})
    assert len(first["files"]) == 2 and first["nextCursor"]
    forged = base64.urlsafe_b64encode(b'{"v":1,"after":[7,"x"],"scope":null}').decode()
    for cursor in ("not-a-cursor", "!!!!", first["nextCursor"][:-4], forged):
        err = error(server, "list_files", {"cursor": cursor})
        assert err["code"] == "invalid_argument" and "cursor" in err["message"], (cursor, err)
    other_scope = error(server, "list_files", {"cursor": first["nextCursor"], "scope": str(docs)})
    assert other_scope["code"] == "invalid_argument" and "scope" in other_scope["message"]
    for limit in (0, 5001):
        assert error(server, "list_files", {"limit": limit})["code"] == "invalid_argument"


def test_list_files_refuses_a_hand_made_cursor_of_the_right_shape(tmp_path: Path) -> None:
    """Only issued cursors page on (issue 28): one written by hand, or signed for another index, is refused."""
    server, docs = serve(tmp_path)
    for n in range(5):
        (docs / f"f{n}.md").write_text("x\n", "utf-8")
    issued = ok(server, "list_files", {"limit": 2})["nextCursor"]
    body = base64.urlsafe_b64encode(f'{{"v":1,"after":[0,"{docs}/f3.md"],"scope":null}}'.encode()).decode()
    for forged in (body.rstrip("="), body.rstrip("=") + "." + issued.rpartition(".")[2]):
        err = error(server, "list_files", {"cursor": forged})
        assert err["code"] == "invalid_argument" and "issued" in err["message"], err
    (tmp_path / "other").mkdir()
    other_index, _ = serve(tmp_path / "other")
    assert error(other_index, "list_files", {"cursor": issued})["code"] == "invalid_argument"
    again, _ = serve(tmp_path)  # another process on the same index (a new server, the CLI) pages on
    assert [f["displayPath"] for f in ok(again, "list_files", {"cursor": issued, "limit": 2})["files"]] == \
        ["f2.md", "f3.md"]


# ------------------------------------------------------------------ the large-ingest path with the real model

@pytest.mark.model  # in `make test`: the in-memory MCP path with the real model
def test_a_large_ingest_job_with_the_real_model_becomes_searchable(tmp_path: Path, real_embedder: Any) -> None:
    server, _docs = serve(tmp_path, real_embedder)
    content = big_note("FLANGE_CODE_8812", 3 * THRESHOLD)
    done = wait_for(server, ok(server, "ingest_data", {"source": "manual", "content": content}))
    assert done["phase"] == "succeeded" and done["kind"] == "ingest_data", done
    hits = ok(server, "query_documents", {"query": "what does FLANGE_CODE_8812 mean", "topK": 3})["results"]
    assert hits[0]["source"] == "manual"


# ------------------------------------------------------------------ bounded read_file

def test_read_file_comes_in_bounded_pages_that_join_to_the_document(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path)
    content = big_note("PAGEMARK_77", 3 * THRESHOLD)
    wait_for(server, ok(server, "ingest_data", {"source": "paged", "content": content}))
    first = ok(server, "read_file", {"source": "paged", "maxChars": 5000})
    assert len(first["content"]) <= 5000 and first["nextOffset"] == len(first["content"])
    assert first["totalChars"] == len(first["content"]) + first["remainingChars"] > 5000
    whole = read_all(server, {"source": "paged", "maxChars": 5000})
    assert len(whole) == first["totalChars"] and whole.count("PAGEMARK_77") == content.count("PAGEMARK_77")
    default = ok(server, "read_file", {"source": "paged"})
    assert len(default["content"]) <= 20_000


def test_read_file_refuses_a_stale_revision_and_a_bad_offset(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path)
    for name in ("one", "two"):
        wait_for(server, ok(server, "ingest_data", {"source": name, "content": big_note(name.upper(), 3 * THRESHOLD)}))
    one = ok(server, "read_file", {"source": "one", "maxChars": 1000})
    other = error(server, "read_file", {"source": "two", "offset": one["nextOffset"], "revision": one["revision"]})
    assert other["code"] == "invalid_argument" and "revision" in other["message"]
    wait_for(server, ok(server, "ingest_data", {"source": "one", "content": big_note("CHANGED", 3 * THRESHOLD)}))
    stale = error(server, "read_file", {"source": "one", "offset": one["nextOffset"], "revision": one["revision"]})
    assert stale["code"] == "invalid_argument" and "changed" in stale["message"]
    assert error(server, "read_file", {"source": "one", "offset": 10**6})["code"] == "invalid_argument"
    assert error(server, "read_file", {"source": "one", "maxChars": 10})["code"] == "invalid_argument"


# ------------------------------------------------------------------ progress notifications

def test_sync_start_with_a_progress_token_reports_progress_until_the_job_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server, docs = serve(tmp_path)
    for n in range(12):
        (docs / f"note{n}.md").write_text(f"# Note {n}\n\nTurbine inspection {n}: the gearbox was fine.\n")
    seen: list[tuple[float, float | None, str | None]] = []

    async def run() -> Any:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        async with Client(server) as client:
            return await client.call_tool("sync_start", {}, progress_handler=on_progress, raise_on_error=False)

    result = asyncio.run(run())
    job = result.structured_content
    assert not result.is_error and job["phase"] == "succeeded" and job["counts"]["added"] == 12
    assert seen, "no progress notification arrived"
    assert all(job["jobId"] in (message or "") for _p, _t, message in seen)
    assert [p for p, _t, _m in seen] == sorted(p for p, _t, _m in seen)  # progress never goes back
    for n in range(12, 40):
        (docs / f"note{n}.md").write_text(f"# Note {n}\n\nTurbine inspection {n}: the blades were fine.\n")
    monkeypatch.setattr(server_module, "FOLLOW_MAX_S", 0.0)  # a sync that outlasts the follow
    result = asyncio.run(run())
    running = result.structured_content
    assert not result.is_error and running["finishedAt"] is None and running["jobId"]
    assert wait_for(server, running)["counts"]["added"] == 28


def test_error_hints_over_mcp_name_mcp_tools(tmp_path: Path) -> None:
    server, docs = serve(tmp_path)
    (docs / "later.md").write_text("# Later\n\nNot indexed yet.\n")
    err = error(server, "read_file", {"filePath": str(docs / "later.md")})
    assert err["code"] == "not_found"
    assert "`sync_start` tool" in err["hint"] and "`minirag sync`" not in err["hint"]


def test_read_chunk_neighbors_stays_within_max_chars_and_counts_what_it_left_out(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path)
    content = big_note("FLANGE_77", 20 * THRESHOLD)
    wait_for(server, ok(server, "ingest_data", {"source": "long-notes", "content": content}))
    default = ok(server, "read_chunk_neighbors", {"source": "long-notes", "chunkIndex": 3, "before": 3, "after": 50})
    assert sum(len(c["text"]) for c in default["chunks"]) <= 20_000 and default["omittedAfter"] > 0
    whole = ok(server, "read_chunk_neighbors", {"source": "long-notes", "chunkIndex": 3, "before": 3, "after": 50,
                                                "maxChars": 200_000})
    assert whole["omittedBefore"] == whole["omittedAfter"] == 0 and whole["chunks"][0]["chunkIndex"] == 0
    total = sum(len(c["text"]) for c in whole["chunks"])
    cap = max(1000, total // 2)
    part = ok(server, "read_chunk_neighbors", {"source": "long-notes", "chunkIndex": 3, "before": 3, "after": 50,
                                               "maxChars": cap})
    indices = [c["chunkIndex"] for c in part["chunks"]]
    assert 3 in indices and indices == list(range(indices[0], indices[-1] + 1))  # contiguous around the hit
    assert sum(len(c["text"]) for c in part["chunks"]) <= cap or indices == [3]
    assert part["omittedBefore"] + part["omittedAfter"] == len(whole["chunks"]) - len(indices) > 0
    assert error(server, "read_chunk_neighbors", {"source": "long-notes", "chunkIndex": 3, "maxChars": 5})[
        "code"] == "invalid_argument"


def test_query_documents_as_markdown_gives_numbered_cited_hits_with_surrounding_lines(tmp_path: Path) -> None:
    server, docs = serve(tmp_path)
    lines = [f"Line {n} talks about tea." for n in range(1, 41)]
    lines[19] = "The gearbox code QX_7741_FLANGE means the flange is loose."
    (docs / "manual.md").write_text("# Manual\n\n" + "\n\n".join(lines) + "\n", "utf-8")
    wait_for(server, ok(server, "sync_start", {}))
    async def run() -> Any:
        async with Client(server) as client:
            return await client.call_tool("query_documents", {"query": "QX_7741_FLANGE", "topK": 3,
                                                              "format": "markdown", "contextLines": 2},
                                          raise_on_error=False)

    result = asyncio.run(run())
    block = result.structured_content["markdown"]
    assert not result.is_error and result.content[0].text == block
    assert result.structured_content["resultCount"] >= 1
    first = block.split("\n2. ")[0]
    assert re.search(r"^1\. `manual\.md:\d+`", first, re.M) and "```" in first
    assert "QX_7741_FLANGE" in first and "Line 19 talks about tea." in first  # a line before the passage
    plain = ok(server, "query_documents", {"query": "QX_7741_FLANGE", "topK": 3})
    assert plain["results"][0]["displayPath"] == "manual.md"  # the JSON answer ranks the same hit first
    assert error(server, "query_documents", {"query": "x", "format": "markdown", "contextLines": 99})[
        "code"] == "invalid_argument"


def test_search_and_grep_replies_stay_within_the_budget_as_the_client_receives_them(tmp_path: Path) -> None:
    from appliance.assemble.paging import REPLY_BUDGET_CHARS

    server, docs = serve(tmp_path)
    rng = random.Random(7)
    vocabulary = [f"{a}{b}" for a in ("val", "sel", "tor", "gas", "pum", "fil")
                  for b in ("ve", "al", "que", "ket", "p", "ter")]
    for n in range(40):  # 40 files of distinct long sections: topK 100 with parents would be several 100 KB
        sections = "\n\n".join(f"## Part {k}\n\n" + " ".join(rng.choice(vocabulary) for _ in range(400)) + " torque"
                                for k in range(4))
        (docs / f"manual{n}.md").write_text(f"# Manual {n}\n\n{sections}\n", encoding="utf-8")
    wait_for(server, ok(server, "sync_start", {}))
    for name, args in (("query_documents", {"query": "valve seal torque spec", "topK": 100, "sections": "full"}),
                       ("grep", {"pattern": "torque", "maxResults": 500})):
        result = call(server, name, args)
        assert not result.is_error, result.structured_content
        wire = result.content[0].text
        assert len(wire) <= REPLY_BUDGET_CHARS, (name, len(wire))
        data = result.structured_content
        assert data.get("trimmed") or data.get("truncated"), name  # it was cut, and says so
