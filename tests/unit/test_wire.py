"""A record is its own wire shape: fields in camelCase, the CLI's and the tools' forms from one model."""
from __future__ import annotations

from appliance.results import Document, FileProblem, RunReport, SyncRunning, Tally


def test_a_run_report_is_stored_as_clients_receive_it() -> None:
    report = Tally(seen=3, added=1, unchanged=1, failed=[FileProblem("/d/a.pdf", "convert_failed", "broken")],
                   skipped=[FileProblem("/d/.x", "ignored", "an ignore rule")], embedded=4, reused=2).finish()
    stored = report.to_dict()
    assert stored == report.wire(tools=True)  # the last-sync record (status, sync_status) is the tool's shape
    assert stored["failed"] == [{"path": "/d/a.pdf", "code": "convert_failed", "reason": "broken"}]
    assert (stored["failedCount"], stored["chunksEmbedded"], stored["chunksReused"]) == (1, 4, 2)
    assert RunReport.from_dict(stored) == report  # another process's report reads back whole
    assert (report.failed_count, report.chunks_embedded, report.ok) == (1, 4, False)


def test_the_tools_carry_null_keys_the_cli_leaves_out() -> None:
    page = Document(source="/d/a.md", source_kind="file", display_path="a.md", title=None, chunk_count=1,
                    content="x", offset=0, total_chars=1, next_offset=None, remaining_chars=0, revision="r")
    cli, tools = page.wire(), page.wire(tools=True)
    assert list(tools)[:len(cli)] == list(cli) and cli["title"] is None and cli["nextOffset"] is None
    assert set(tools) - set(cli) == {"startLine", "endLine", "totalLines", "pageUnit", "pageStart", "pageEnd",
                                     "totalPages"}
    assert all(tools[key] is None for key in set(tools) - set(cli))


def test_another_process_progress_passes_as_written() -> None:
    written = {"pid": 7, "phase": "indexing", "chunksWritten": 12, "fromANewerVersion": True}
    running = SyncRunning.model_validate(written)
    assert running.chunks_written == 12 and running.wire() == written  # the CLI shows the file as it was
    tools = running.wire(tools=True)  # the tools fill every key the output schema names
    assert tools["fromANewerVersion"] is True and tools["etaSeconds"] is None and tools["chunksWritten"] == 12
