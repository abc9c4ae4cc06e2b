"""A hostile 16 MB HTML table through ingest_data and ingest_url of a live `minirag serve` (issue 28).

Converted in the server process, the table grew its RSS by 840 MB, ran for minutes and pushed
query latency to 4 s. Now it goes to a conversion worker under CONVERT_TIMEOUT: the server's
own RSS stays within +300 MB, every query sent meanwhile answers under 1.5 s, and the ingest
ends within CONVERT_TIMEOUT + 30 s with an error naming the limit it hit.

Which limit it hits must not depend on the machine's speed: a fast machine parses the table in under
CONVERT_TIMEOUT's 30 s. So the test also sets CONVERT_MEMORY_MB below what the parse needs (its DOM
alone takes about 800 MB over the parser imports' ~480 MB of address space): the memory limit holds
on any machine, the timeout on a slow one.
(scripts/faults_untrusted.py runs the same and prints the figures.)
"""
from __future__ import annotations

import pytest

from scripts.faults_untrusted import run

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.model]

TIMEOUT_S = 30
MEMORY_MB = 900


@pytest.mark.timeout(900)
def test_a_hostile_html_table_is_bounded_outside_the_server() -> None:
    result = run(size_mb=16, timeout_s=TIMEOUT_S, memory_mb=MEMORY_MB, via=("data", "url"))
    assert [r["tool"] for r in result["runs"]] == ["ingest_data", "ingest_url"]
    for r in result["runs"]:
        assert r["ended"] and r["phase"] == "failed", r
        error = r["error"]
        assert error["code"] in ("conversion_timeout", "conversion_memory_limit", "conversion_crashed"), r
        assert "CONVERT_TIMEOUT" in error["message"] or "CONVERT_MEMORY_MB" in error["message"], r
        assert r["seconds"] <= TIMEOUT_S + 30, r
        assert r["rss_growth_mb"] <= 300, r
        assert r["queries"] >= 20 and not r["query_errors"], r
        assert r["query_max_s"] < 1.5, r
