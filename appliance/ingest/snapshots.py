"""Dated snapshot sequences (`report-2026-01-31.md`, …): embed what changed, not every copy.

A folder holding three or more files that differ only by an ISO date is a
sequence. A chunk repeated verbatim from the immediately preceding snapshot is
not stored again; the earlier chunk (the survivor) records the later dates it
also stands for. Only the previous snapshot is compared, so a value that changes
and later changes back is stored again where it comes back.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from appliance.chunks import Chunk

SNAPSHOT_NAME = re.compile(r"^(?P<stem>.+?)[-_ ](?P<date>\d{4}-\d{2}-\d{2})(?P<ext>\.[^.]+)$")
MIN_SEQUENCE = 3


@dataclass(frozen=True)
class Member:
    """One file of a sequence: its group key and its date."""

    group: str
    date: str


def snapshot_members(paths: Iterable[Path]) -> dict[Path, Member]:
    """The files that belong to a sequence of at least three, with their group and date."""
    groups: dict[str, list[tuple[Path, str]]] = defaultdict(list)
    for path in paths:
        match = SNAPSHOT_NAME.match(path.name)
        if match:
            key = str(path.parent / (match["stem"] + "*" + match["ext"].lower()))
            groups[key].append((path, match["date"]))
    return {path: Member(key, date) for key, items in groups.items() if len(items) >= MIN_SEQUENCE
            for path, date in items}


@dataclass
class Kept:
    """A chunk that is stored, and the later snapshot dates it also covers."""

    chunk: Chunk
    also_unchanged_on: list[str] = field(default_factory=list)


def dedupe_sequence(members: Sequence[tuple[str, list[Chunk]]]) -> list[list[Kept]]:
    """For snapshots in date order, the chunks each one stores (survivors carry later dates)."""
    previous: dict[str, Kept] = {}
    out: list[list[Kept]] = []
    for date, chunks in members:
        present: dict[str, Kept] = {}
        kept: list[Kept] = []
        for chunk in chunks:
            survivor = previous.get(chunk.text)
            if survivor is not None and chunk.text not in present:
                survivor.also_unchanged_on.append(date)
                present[chunk.text] = survivor
                continue
            entry = Kept(chunk)
            kept.append(entry)
            present.setdefault(chunk.text, entry)
        out.append(kept)
        previous = present
    return out
