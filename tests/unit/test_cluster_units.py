"""`sync --ray` without Ray: how files become tasks, the node fingerprint, and a missing Ray."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.cluster import ClusterUnavailable, ClusterUnreachable
from appliance.cluster.driver import RayIndexer, _check_reachable, connected
from appliance.cluster.node import Fingerprint
from appliance.ingest.discover import FoundFile
from appliance.ingest.snapshots import Member
from appliance.models.manifest import ModelSpec


def test_one_task_per_file_and_one_per_snapshot_sequence_in_date_order() -> None:
    root = Path("/docs")
    files = [FoundFile(root / name, root, 10, 1) for name in
             ("b.md", "a.md", "report-2024-03-01.md", "report-2024-01-01.md", "report-2024-02-01.md")]
    members = {root / f"report-2024-0{m}-01.md": Member("report", f"2024-0{m}-01") for m in (1, 2, 3)}
    units = RayIndexer.units([(f, f"hash-{f.path.name}") for f in files], members)
    assert [[s.source_id for s in u.sources] for u in units] == [
        ["/docs/a.md"], ["/docs/b.md"],
        ["/docs/report-2024-01-01.md", "/docs/report-2024-02-01.md", "/docs/report-2024-03-01.md"]]
    assert units[0].dates is None and units[2].dates == ["2024-01-01", "2024-02-01", "2024-03-01"]
    assert units[0].sources[0].content_hash == "hash-a.md" and units[0].sources[0].path == "a.md"


def test_the_fingerprint_names_what_differs() -> None:
    spec = ModelSpec(id="m", dim=4, max_seq_length=8, query_prefix="", passage_prefix="", source={},
                     files={"model.onnx": "aa", "tokenizer.json": "bb"})
    mine = Fingerprint.of(spec)
    assert mine.difference(Fingerprint.of(spec)) is None
    assert "model.onnx" in (mine.difference(Fingerprint.of(replace(spec, files={**spec.files, "model.onnx": "cc"})))
                            or "")
    assert "dim" in (mine.difference(Fingerprint.of(replace(spec, dim=8))) or "")
    assert "scheme" in (mine.difference(replace(mine, scheme="other")) or "")
    assert "code" in (mine.difference(replace(mine, code="0" * 16)) or "")  # a node with patched appliance code


def test_an_address_that_does_not_answer_is_unreachable() -> None:
    with pytest.raises(ClusterUnreachable, match="does not answer"):
        _check_reachable("127.0.0.1:1")
    with pytest.raises(ClusterUnreachable, match="not a Ray address"):
        _check_reachable("no-port")


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ClusterUnavailable) as caught, connected("127.0.0.1:1"):
        pass
    assert caught.value.code == "cluster_unavailable" and "[cluster]" in (caught.value.hint or "")
