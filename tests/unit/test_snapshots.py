"""Snapshot sequences: membership by name, and de-duplication against the previous snapshot only."""
from pathlib import Path

from appliance.chunks import Chunk
from appliance.ingest.snapshots import dedupe_sequence, snapshot_members


def _chunks(*texts: str) -> list[Chunk]:
    return [Chunk(index=i, section=i, text=t) for i, t in enumerate(texts)]


def test_three_dated_files_with_one_stem_make_a_sequence() -> None:
    d = Path("/docs")
    paths = [d / "prices-2026-01-01.md", d / "prices-2026-01-02.md", d / "prices-2026-01-03.md",
             d / "other-2026-01-01.md", d / "other-2026-01-02.md", d / "prices-2026-01-04.txt"]
    members = snapshot_members(paths)
    assert set(members) == set(paths[:3])
    assert members[paths[1]].date == "2026-01-02"
    assert len({m.group for m in members.values()}) == 1


def test_repeated_chunks_are_kept_once_and_a_revert_is_kept() -> None:
    kept = dedupe_sequence([
        ("2026-01-01", _chunks("header", "price 10")),
        ("2026-01-02", _chunks("header", "price 12")),
        ("2026-01-03", _chunks("header", "price 10")),
    ])
    assert [k.chunk.text for k in kept[0]] == ["header", "price 10"]
    assert kept[0][0].also_unchanged_on == ["2026-01-02", "2026-01-03"]
    assert kept[0][1].also_unchanged_on == []           # 10 -> 12: changed
    assert [k.chunk.text for k in kept[1]] == ["price 12"]
    assert [k.chunk.text for k in kept[2]] == ["price 10"]  # changed back: stored again
