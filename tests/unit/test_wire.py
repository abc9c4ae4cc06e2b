"""The wire shape of a record is its fields in camelCase; a run report's stored form is that shape too."""
from __future__ import annotations

from appliance.results import FileProblem, Tally
from appliance.wire import to_wire


def test_a_run_report_is_stored_as_clients_receive_it() -> None:
    report = Tally(seen=3, added=1, unchanged=1, failed=[FileProblem("/d/a.pdf", "convert_failed", "broken")],
                   skipped=[FileProblem("/d/.x", "ignored", "an ignore rule")], embedded=4, reused=2).finish()
    assert to_wire(report) == report.to_dict()  # the last-sync record (status, sync_status) is the tool's shape
    assert (report.failed_count, report.chunks_embedded, report.ok) == (1, 4, False)
