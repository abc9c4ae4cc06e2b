"""The first sync: a scheduler starting on an empty or stale index syncs at once (issue 28 Build 5), and
`status` says a first sync is pending and when it starts (issue 30 Found 7)."""
from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from fastmcp import Client

from appliance.adapters.scheduler import first_run_at
from appliance.storage.locking import sync_lock
from appliance.sync.state import (
    LAST_SYNC_FILE,
    SCHEDULER_FILE,
    hold_alive_lock,
    process_marker,
    process_started_at,
)
from tests.fixtures.mcp_calls import serve
from tests.integration.test_emptied_root import _app

INTERVAL = 900


def _last_sync(db: Path, finished: float, **counts: object) -> None:
    db.mkdir(parents=True, exist_ok=True)
    report = {"seen": 0, "added": 0, "updated": 0, "unchanged": 0, "refreshed": 0, "scope": None} | counts
    (db / LAST_SYNC_FILE).write_text(json.dumps(report | {"finishedAt": finished}))


def test_a_scheduler_starting_on_an_empty_or_partly_synced_index_syncs_at_once(tmp_path: Path) -> None:
    now = time.time()
    assert first_run_at(tmp_path, INTERVAL, now) == now  # never synced
    _last_sync(tmp_path, now - 10, seen=3)  # synced 10 s ago, but nothing is indexed
    assert first_run_at(tmp_path, INTERVAL, now) == now
    _last_sync(tmp_path, now - 10, added=3, scope="/docs/a")  # only one folder was synced
    assert first_run_at(tmp_path, INTERVAL, now) == now
    _last_sync(tmp_path, now - 10, added=3)  # a whole sync that indexed files: the next one after the interval
    assert first_run_at(tmp_path, INTERVAL, now) == now - 10 + INTERVAL
    _last_sync(tmp_path, now - INTERVAL - 1, unchanged=3)  # stale
    assert first_run_at(tmp_path, INTERVAL, now) == now


def test_status_says_when_the_schedulers_first_sync_starts(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nText.\n")
    app = _app(tmp_path, docs)
    alone = app.status().first_sync
    assert alone is not None and alone.starts_at is None and "`minirag sync`" in alone.message
    db = tmp_path / "db"
    fd = hold_alive_lock(db)  # this process plays the live scheduler
    try:
        due = time.time() + 30
        (db / SCHEDULER_FILE).write_text(json.dumps({"schema": 1, "pid": os.getpid(), **process_marker(),
                                                     "aliveLock": True, "state": "idle", "nextRunAt": due}))
        pending = app.status().first_sync
        assert pending is not None and pending.starts_at == due and 25 < (pending.starts_in_seconds or 0) <= 30
        assert "the scheduler's sync starts at" in pending.message
        app.sync()
        assert app.status().first_sync is None  # synced: nothing pending any more
    finally:
        assert fd is not None
        os.close(fd)


def test_status_in_the_container_before_the_scheduler_starts(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    first = _app(tmp_path, docs, MINIRAG_CONTAINER="1").status().first_sync
    assert first is not None and "at most 20 s after the container started" in first.message
    started = process_started_at(1)
    assert started is not None and started <= time.time()
    if started + 20 > time.time():  # a container that just started: the bound is given
        assert first.starts_at == started + 20


def test_a_one_off_command_in_the_container_promises_no_scheduler(tmp_path: Path, monkeypatch) -> None:
    """`docker run IMAGE status` (or `query`) runs as PID 1 in a container of its own: no server loads a model
    there and no scheduler starts, so it says how to sync instead of a start time that never comes."""
    docs = tmp_path / "docs"
    docs.mkdir()
    monkeypatch.setattr("appliance.health.os.getpid", lambda: 1)
    app = _app(tmp_path, docs, MINIRAG_CONTAINER="1")
    first = app.status().first_sync
    assert first is not None and first.starts_at is None and "no scheduler runs here" in first.message
    why = app.search("anything").empty_index
    assert why is not None and "`minirag sync`" in why.message


def test_mcp_status_reports_the_pending_first_sync_for_an_agent(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path)

    async def status() -> dict[str, object]:
        async with Client(server) as client:
            return (await client.call_tool("status", {})).structured_content or {}

    data = asyncio.run(status())
    assert data["index"]["chunkCount"] == 0 and data["scheduler"] is None  # type: ignore[index]
    first = data["firstSync"]
    assert isinstance(first, dict) and first["startsAt"] is None and "sync_start" in first["message"]


def test_a_query_of_an_empty_index_says_why_it_found_nothing_and_how_to_fill_it(tmp_path: Path) -> None:
    """An agent (or a user) asking before the first sync gets no hits with the reason beside them, worded for
    its reader; once the index holds chunks, a query that matches nothing gets no such note."""
    server, docs = serve(tmp_path)

    async def query(text: str) -> dict[str, object]:
        async with Client(server) as client:
            return (await client.call_tool("query_documents", {"query": text})).structured_content or {}

    empty = asyncio.run(query("harbour lantern"))
    note = empty["emptyIndex"]
    assert empty["results"] == [] and isinstance(note, dict) and "sync_start" in note["message"]
    app = _app(tmp_path, docs)
    cli_note = app.search("harbour lantern").empty_index
    assert cli_note is not None and "`minirag sync`" in cli_note.message
    with sync_lock(app.settings.db_path):  # a sync holds the index: the note says it is being filled
        filling = app.search("harbour lantern").empty_index
    assert filling is not None and "a sync is filling it now" in filling.message
    (docs / "a.md").write_text("# Harbour\n\nThe lantern by the harbour.\n")
    app.sync()
    filled = app.search("harbour lantern", scope=str(docs / "nowhere"))
    assert filled.results == [] and filled.empty_index is None
    assert "emptyIndex" not in asyncio.run(query("harbour lantern"))


def test_the_markdown_answer_of_an_empty_index_says_why_too(tmp_path: Path) -> None:
    server, _docs = serve(tmp_path)

    async def query() -> tuple[str, dict[str, object]]:
        async with Client(server) as client:
            got = await client.call_tool("query_documents", {"query": "harbour", "format": "markdown"})
            return got.content[0].text, got.structured_content or {}  # type: ignore[union-attr]

    text, data = asyncio.run(query())
    assert data["resultCount"] == 0 and "sync_start" in text and "`minirag sync`" not in text
