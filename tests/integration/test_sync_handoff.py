"""`minirag sync` handed to a warm server on the same index (appliance/sync/handoff.py), in one process:
the server's Appliance listens, a second Appliance's settings ask. Real LanceDB and model.
The subprocess end to end (a real `minirag serve`, the CLI beside it, Ctrl-C) is in
tests/integration/test_sync_handoff_processes.py."""
from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.sync import handoff, runner as sync_runner

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def served(tmp_path: Path, make_app: Callable[..., Any]) -> Iterator[tuple[Any, handoff.Listener, Path]]:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(3):
        (docs / f"note-{n}.md").write_text(f"# Note {n}\n\nThe lock keeper logged barge {n} at dawn.\n", "utf-8")
    server = make_app(docs)
    listener = sync_runner.listener(server)
    assert listener.start()
    yield server, listener, docs
    listener.close()


def test_a_warm_server_runs_the_sync_and_reports_it(served: tuple[Any, handoff.Listener, Path],
                                                    make_app: Callable[..., Any]) -> None:
    server, _listener, docs = served
    client = make_app(docs).settings
    seen: list[tuple[str, int, int, str]] = []
    report = handoff.request_sync(client, lambda *p: seen.append(p))
    assert report is not None and report.added == 3 and report.chunks_embedded == 3 and report.ok
    assert seen  # the server's progress reached the client
    synced = sorted(s.source_id for s in server.index.registry.source_rows())
    assert synced == [str(docs / f"note-{n}.md") for n in range(3)]
    (docs / "note-1.md").write_text("# Note 1\n\nThe lock keeper logged a late barge.\n", "utf-8")
    again = handoff.request_sync(client)
    assert again is not None and (again.updated, again.unchanged, again.chunks_embedded) == (1, 2, 1)
    assert server.status().last_sync is not None


def test_a_warm_server_keeps_an_emptied_root_and_the_client_hears_why(
        served: tuple[Any, handoff.Listener, Path], make_app: Callable[..., Any]) -> None:
    server, _listener, docs = served
    client = make_app(docs).settings
    assert handoff.request_sync(client) is not None
    for path in docs.iterdir():
        path.unlink()
    report = handoff.request_sync(client)
    assert report is not None and not report.ok and report.deleted == 0
    assert [h.root for h in report.held_roots] == [str(docs)] and "--allow-deletions" in report.held_roots[0].reason
    assert len(server.index.registry.source_rows()) == 3


def test_other_inputs_are_declined_and_synced_here(served: tuple[Any, handoff.Listener, Path],
                                                   make_app: Callable[..., Any], tmp_path: Path) -> None:
    server, _listener, docs = served
    other_budget = dataclasses.replace(make_app(docs).settings, chunk_token_budget=128)
    assert handoff.request_sync(other_budget) is None
    # The same root path can hold another folder (another container's mount): the directory behind
    # each path is part of the fingerprint, not the path alone.
    before = handoff.fingerprint(server.settings)
    docs.rename(tmp_path / "docs-before")
    docs.mkdir()
    assert handoff.fingerprint(server.settings) != before
    assert server.index.registry.source_rows() == []  # nothing was synced by the server


def test_only_one_listener_and_a_stale_socket_is_taken_over(served: tuple[Any, handoff.Listener, Path],
                                                           make_app: Callable[..., Any]) -> None:
    server, listener, docs = served
    assert not sync_runner.listener(make_app(docs)).start()  # a live server listens already
    listener.close()
    path = handoff.socket_path(server.settings.db_path)
    assert path is not None and not path.exists()  # it removed its socket
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # a server killed outright leaves its socket file, nobody accepting
    dead.close()
    assert path.exists() and handoff.request_sync(server.settings) is None
    second = sync_runner.listener(make_app(docs))
    assert second.start()
    try:
        report = handoff.request_sync(server.settings)
        assert report is not None and report.added == 3
    finally:
        second.close()


def test_a_busy_index_falls_back_to_the_local_sync(served: tuple[Any, handoff.Listener, Path]) -> None:
    from appliance.storage.locking import sync_lock

    server, _listener, _docs = served
    with sync_lock(server.settings.db_path):  # another sync holds the lock: the server declines, with the error
        assert handoff.request_sync(server.settings) is None


def test_a_garbled_request_harms_nothing(served: tuple[Any, handoff.Listener, Path]) -> None:
    server, _listener, _docs = served
    path = handoff.socket_path(server.settings.db_path)
    for junk in (b"not json\n", b'{"protocol": 99, "op": "sync"}\n', b"[1, 2]\n", b"\n"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(str(path))
            conn.sendall(junk)
            conn.shutdown(socket.SHUT_WR)
            answer = conn.recv(4096)
            assert b"report" not in answer
    report = handoff.request_sync(server.settings)
    assert report is not None and report.added == 3
