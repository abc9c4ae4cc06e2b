"""Every MCP tool through a real stdio session against `minirag serve`, success and error paths."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.adapters.instructions import MAX_INSTRUCTIONS_CHARS, POLICY, build_instructions
from appliance.storage.locking import sync_lock

pytestmark = [pytest.mark.model, pytest.mark.slow]

TOOLS = {"sync_start", "sync_status", "ingest_file", "ingest_data", "ingest_url", "query_documents",
         "read_chunk_neighbors", "read_file", "list_files", "delete_file", "status", "grep", "list_roots",
         "sync_cancel"}


def test_instructions_fit_the_budget_with_the_longest_operator_line() -> None:
    assert len(POLICY) < 1800
    text = build_instructions("x" * 300)
    assert len(text) <= MAX_INSTRUCTIONS_CHARS and text.endswith("x" * 300)
    for must in ("query_documents", "status", "parents", "never", "citing"):
        assert must.lower() in text.lower()


def test_tools_are_listed_with_schemas_and_annotations(session: Any) -> None:
    tools = {t.name: t for t in session.run(session.client.list_tools())}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
        assert tool.annotations is not None and tool.annotations.open_world_hint is (tool.name == "ingest_url")
    query = tools["query_documents"].input_schema["properties"]
    assert query["topK"]["minimum"] == 1 and query["topK"]["maximum"] == 100
    assert tools["ingest_data"].input_schema["properties"]["format"]["enum"] == ["text", "markdown", "html"]
    assert tools["query_documents"].annotations.read_only_hint is True
    assert tools["delete_file"].annotations.destructive_hint is True
    instructions = session.client.instructions
    assert "query_documents" in instructions and len(instructions) <= MAX_INSTRUCTIONS_CHARS


def test_status_reports_the_index(session: Any, corpus: Path) -> None:
    out = session.ok("status")
    assert out["config"]["baseDirs"] == [str(corpus)]
    assert out["index"]["sourceCount"] == 4 and out.get("configError") is None


def test_query_finds_an_exact_identifier_with_its_section(session: Any, corpus: Path) -> None:
    out = session.ok("query_documents", {"query": "ERR_ZORBLATT_7741", "topK": 3})
    top = out["results"][0]
    assert top["filePath"] == str(corpus / "guide/errors.md")
    assert "cool for ten minutes" in top["text"] and top["parentId"] in out["parents"]
    assert all("private" not in hit["filePath"] for hit in out["results"])


def test_query_crosses_languages(session: Any, corpus: Path) -> None:
    out = session.ok("query_documents", {"query": "how cold are winters in Novosibirsk", "topK": 2})
    assert out["results"][0]["displayPath"] == "ru/pogoda.md"


def test_query_scope_and_topk_bounds(session: Any, corpus: Path) -> None:
    out = session.ok("query_documents", {"query": "vacation days", "topK": 5, "scope": str(corpus / "notes")})
    assert {h["displayPath"] for h in out["results"]} <= {"notes/recipe.txt"}
    assert session.error("query_documents", {"query": "x", "topK": 0})["code"] == "invalid_argument"
    assert session.error("query_documents", {"query": "x", "topK": 101})["code"] == "invalid_argument"
    assert session.error("query_documents", {"query": ""})["code"] == "invalid_argument"
    assert session.error("query_documents", {"query": "   "})["code"] == "invalid_argument"
    assert session.error("query_documents", {"topK": 3})["code"] == "invalid_argument"
    assert session.error("query_documents", {"query": "x", "scope": "/etc"})["code"] == "invalid_argument"


def test_read_file_and_neighbors(session: Any, corpus: Path) -> None:
    path = str(corpus / "guide/errors.md")
    doc = session.ok("read_file", {"filePath": path})
    assert "ERR_NET_12" in doc["content"] and doc["displayPath"] == "guide/errors.md"
    around = session.ok("read_chunk_neighbors", {"filePath": path, "chunkIndex": 0, "before": 0, "after": 5})
    assert around["chunks"][0]["chunkIndex"] == 0
    assert session.error("read_file", {"filePath": "guide/errors.md"})["code"] == "invalid_argument"
    assert session.error("read_file", {"filePath": "/etc/passwd"})["code"] == "path_outside_roots"
    assert session.error("read_file", {"source": "no-such-source"})["code"] == "not_found"
    assert session.error("read_file", {})["code"] == "invalid_argument"
    assert session.error("read_chunk_neighbors", {"filePath": path, "chunkIndex": 999})["code"] == "not_found"
    assert session.error("read_chunk_neighbors", {"filePath": path, "chunkIndex": -1})["code"] == "invalid_argument"


def test_list_files_shows_states_and_hides_ignored(session: Any, corpus: Path) -> None:
    out = session.ok("list_files")
    paths = {f["filePath"]: f["state"] for f in out["files"]}
    assert paths[str(corpus / "guide/vacation.md")] == "indexed"
    assert not any("private" in p for p in paths)
    scoped = session.ok("list_files", {"scope": str(corpus / "ru")})
    assert [f["filePath"] for f in scoped["files"]] == [str(corpus / "ru/pogoda.md")]


def test_ingest_data_then_query_read_and_delete(session: Any) -> None:
    report = session.ok("ingest_data", {"source": "meeting-notes", "format": "markdown", "title": "Standup",
                                         "content": "# Standup\n\nWe agreed to ship the QUUXINATOR on Friday.\n"})
    assert report["added"] == 1 and report["chunks"] >= 1
    hits = session.ok("query_documents", {"query": "QUUXINATOR ship date", "topK": 3})["results"]
    assert hits[0]["source"] == "meeting-notes" and hits[0]["filePath"] is None
    assert "Friday" in session.ok("read_file", {"source": "meeting-notes"})["content"]
    assert session.ok("delete_file", {"source": "meeting-notes"})["deleted"] is True
    assert session.error("delete_file", {"source": "meeting-notes"})["code"] == "not_found"
    assert session.error("ingest_data", {"source": "/abs", "content": "x"})["code"] == "invalid_argument"
    assert session.error("ingest_data", {"source": "s", "content": "x", "format": "pdf"})["code"] == "invalid_argument"


def test_ingest_file_errors(session: Any, corpus: Path) -> None:
    assert session.error("ingest_file", {"filePath": "notes/recipe.txt"})["code"] == "invalid_argument"
    assert session.error("ingest_file", {"filePath": "/etc/hostname"})["code"] == "path_outside_roots"
    assert session.error("ingest_file", {"filePath": str(corpus / "missing.md")})["code"] == "not_found"


def test_ingest_file_reindexes_one_file(session: Any, corpus: Path) -> None:
    report = session.ok("ingest_file", {"filePath": str(corpus / "notes/recipe.txt")})
    assert report["seen"] == 1 and report["added"] + report["updated"] == 1 and report["failedCount"] == 0


def test_ingest_url_is_refused_while_disabled(session: Any) -> None:
    err = session.error("ingest_url", {"url": "https://example.com/page"})
    assert err["code"] == "url_ingest_disabled" and "ALLOW_URL_INGEST" in err["hint"]
    assert session.error("ingest_url", {"url": "file:///etc/passwd"})["code"] == "invalid_argument"


def test_grep_uses_the_indexers_file_list(session: Any, corpus: Path) -> None:
    out = session.ok("grep", {"pattern": "err_zorblatt_7741"})
    assert [(m["displayPath"], m["lineNumber"]) for m in out["matches"]] == [("guide/errors.md", 8)]
    regex = session.ok("grep", {"pattern": r"ERR_[A-Z]+_\d+", "regex": True, "caseSensitive": True})
    assert regex["matchCount"] == 2
    russian = session.ok("grep", {"pattern": "морозы", "scope": str(corpus / "ru")})
    assert russian["matches"][0]["lineNumber"] == 3
    assert session.ok("grep", {"pattern": "e", "maxResults": 1})["truncated"] is True
    assert session.error("grep", {"pattern": "(", "regex": True})["code"] == "invalid_argument"
    assert session.error("grep", {"pattern": "x", "maxResults": 501})["code"] == "invalid_argument"


def test_grep_survives_a_catastrophic_regex(session: Any, corpus: Path) -> None:
    # (a|aa)+$ backtracks exponentially in both `re` and `regex` on a run of a's that fails at the end.
    # grep reads the indexed text, so the file is indexed first (and removed from the index after).
    evil = corpus / "notes/evil.txt"
    evil.write_text("a" * 60 + "!\n", "utf-8")
    try:
        assert session.ok("ingest_file", {"filePath": str(evil)})["added"] == 1
        started = time.monotonic()
        out = session.ok("grep", {"pattern": "(a|aa)+$", "regex": True})
        assert time.monotonic() - started < 15
        assert out["stopped"] in ("regex_timeout", "deadline")
    finally:
        session.call("delete_file", {"filePath": str(evil)})
        evil.unlink()


def test_sync_job_runs_in_the_background(session: Any, server_env: dict[str, str]) -> None:
    with sync_lock(Path(server_env["DB_PATH"])):  # another process syncing the same index
        busy = session.error("sync_start", {})
    assert busy["code"] == "sync_busy" and "pid" in busy["message"]
    job = session.ok("sync_start", {})
    assert job["phase"] in ("queued", "scanning", "indexing", "succeeded")
    assert job["kind"] == "sync" and job["source"] is None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = session.ok("sync_status", {"jobId": job["jobId"]})
        if job["finishedAt"]:
            break
        time.sleep(0.5)
    assert job["phase"] == "succeeded", job
    # 4 indexed and the folder private/, which .indexignore leaves out: seen and named, not indexed
    assert job["counts"]["seen"] == 5 and job["counts"]["skippedCount"] == 1 and job["failures"] == []
    activity = session.ok("sync_status", {})  # no jobId: the index's sync activity, whoever started it
    assert activity["running"] is None and activity["lastSync"]["seen"] == 5
    assert [(f["code"], Path(f["path"]).name) for f in activity["lastSync"]["skipped"]] == [("ignored", "private")]
    assert activity["jobs"][0]["jobId"] == job["jobId"] and activity["jobs"][0]["phase"] == "succeeded"
    with sync_lock(Path(server_env["DB_PATH"])):  # a sync of another process, e.g. the scheduler's
        assert session.ok("sync_status", {})["running"]["pid"] == os.getpid()
        assert session.ok("status")["syncRunning"]["pid"] == os.getpid()
    assert session.error("sync_status", {"jobId": "nope"})["code"] == "not_found"
    assert session.error("sync_start", {"path": "guide"})["code"] == "invalid_argument"


def test_broken_config_answers_status_and_refuses_the_rest(server_env: dict[str, str], live_session) -> None:
    live = live_session(server_env | {"BASE_DIRS": "not json"})
    try:
        out = live.ok("status")
        assert out["configError"]["code"] == "config_error" and "BASE_DIRS" in out["configError"]["message"]
        assert out["version"]
        assert live.error("query_documents", {"query": "anything"})["code"] == "config_error"
        assert live.error("list_files")["code"] == "config_error"
    finally:
        live.close()


def test_unknown_model_is_a_config_error_not_a_crash(server_env: dict[str, str], live_session) -> None:
    live = live_session(server_env | {"MODEL_NAME": "no/such-model"})
    try:
        assert live.ok("status")["configError"]["code"] in ("config_error", "model_missing")
        assert live.error("query_documents", {"query": "anything"})["code"] in ("config_error", "model_missing")
    finally:
        live.close()
