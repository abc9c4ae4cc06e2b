"""A write another process committed before a read began is in that read's answer.

Every read operation of the service asks for the index's latest commit first; LanceDB's own
consistency interval (a second) would otherwise let a window that has the tables open
answer from the version it last saw. The second Appliance has its own LanceDB handles,
as a second MCP window or a `minirag` command beside the server has."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def pair(tmp_path: Path, make_app: Callable[..., Any]) -> tuple[Any, Any]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe lock keeper opens the upper gate at six.\n", "utf-8")
    reader = make_app(docs)
    reader.sync()
    writer = make_app(docs)
    # The reader has every table open and has read them: its handles would serve this version.
    assert {f.file_path for f in reader.list_files().files} == {str(docs / "a.md")}
    assert reader.status().index.source_count == 1
    return reader, writer


def test_every_read_sees_a_peer_commit_at_once(pair: tuple[Any, Any]) -> None:
    reader, writer = pair
    writer.ingest_data("notes/rota", "# Rota\n\nThe barge rota for week nine names Ilse.")
    listed = reader.list_files()
    assert [i.source for i in listed.sources] == ["notes/rota"]
    assert reader.list_roots().data_sources == 1
    health = reader.status().index
    assert health.source_count == 2 and health.consistency_warning is None
    assert "week nine" in reader.read("notes/rota", is_source=True).content
    assert reader.read_neighbors("notes/rota", True, 0).chunks
    assert [m.source for m in reader.grep("barge rota").matches] == ["notes/rota"]
    assert reader.search("barge rota week nine", top_k=1).results[0].source == "notes/rota"


def test_a_peer_delete_is_seen_at_once(pair: tuple[Any, Any]) -> None:
    reader, writer = pair
    writer.ingest_data("notes/rota", "# Rota\n\nThe barge rota for week nine names Ilse.")
    assert reader.read("notes/rota", is_source=True).chunk_count == 1
    writer.delete("notes/rota", is_source=True)
    assert reader.list_files().sources == []
    from appliance.errors import NotFound

    with pytest.raises(NotFound):
        reader.read("notes/rota", is_source=True)
