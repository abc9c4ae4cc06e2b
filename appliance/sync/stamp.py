"""A no-change sync proved without opening the index.

A sync over every root that found nothing to do, and during which nothing was committed to
the index, leaves a stamp beside the index: digests of everything its decisions depend on —
the settings with the model's manifest entry and the chunking scheme, the files it found and
skipped with their sizes and modification times, and the index's committed state (every
table's version manifests, and identity.json) — plus its report. A later `minirag sync` that
finds the same three digests has nothing to do either, so it repeats that report without
importing LanceDB or the model (scripts/bench_small_change.py: the CLI's no-change sync).

Every commit by any process writes a new manifest, any change to a file changes its stat, any
changed setting the digest: each sends the sync down its full path, which writes a new stamp
when it again finds nothing to do. Content-hash change detection never takes this path: there
a stat cannot prove a file unchanged.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.ingest import formats
from appliance.ingest.discover import FoundFile, Skipped, walk
from appliance.results import FileProblem, RunReport, Tally
from appliance.storage.locking import sync_lock
from appliance.sync.state import read_json, record_finished_sync, write_json

STAMP_FILE = "unchanged_sync.json"


@dataclass(frozen=True)
class Stamp:
    inputs: str
    index: str
    files: str
    report: dict[str, Any]


def inputs_digest(settings: Settings) -> str:
    """The settings, the model's manifest entry, the chunking scheme and the accepted extensions."""
    from appliance import __version__
    from appliance.ingest.chunk import SCHEME_VERSION
    from appliance.models.manifest import load_spec

    spec = load_spec(settings.model_name, settings.models_dir, settings.models_manifest)
    accepted = sorted(formats.extensions(settings))
    return _digest([repr(settings), repr(spec), SCHEME_VERSION, __version__, accepted])


def index_state(db_path: Path) -> str | None:
    """The index's committed state: each table's manifests (name, size, mtime) and identity.json;
    None when there is no table to speak of (a new or unreadable index is never stamped)."""
    parts: list[object] = []
    try:
        tables = sorted(entry.name for entry in os.scandir(db_path) if entry.name.endswith(".lance"))
        for table in tables:
            versions = db_path / table / "_versions"
            parts.append([table, sorted((e.name, st.st_size, st.st_mtime_ns)
                                        for e in os.scandir(versions) for st in (e.stat(),))])
        identity = db_path / "identity.json"
        parts.append(identity.read_text("utf-8") if identity.exists() else None)
    except OSError:
        return None
    return _digest(parts) if tables else None


class FilesDigest:
    """What a walk found, folded in as it goes: each file's path, root and stat, each skip's reason."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def add(self, item: FoundFile | Skipped) -> None:
        if isinstance(item, FoundFile):
            entry = ["f", str(item.path), str(item.root), item.size, item.mtime_ns]
        else:
            entry = ["s", str(item.path), item.code, item.reason]
        self._hash.update(json.dumps(entry, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def nothing_changed(report: RunReport) -> bool:
    return not (report.added or report.updated or report.refreshed or report.deleted or report.chunks
                or report.held_roots)


def record(db_path: Path, stamp: Stamp) -> None:
    """Best effort: a stamp that cannot be written only costs the next sync its shortcut."""
    with contextlib.suppress(OSError):
        write_json(db_path, STAMP_FILE, {"inputs": stamp.inputs, "index": stamp.index, "files": stamp.files,
                                         "report": stamp.report})


def replay(settings: Settings) -> RunReport | None:
    """The report of a sync of every root when the stamp proves it has nothing to do; else None
    (the caller runs the sync). Holds the sync lock while it looks, as a sync would."""
    if settings.change_detection != "stat":
        return None
    db_path = settings.db_path
    saved = read_json(db_path, STAMP_FILE)
    if not saved or saved.get("inputs") != inputs_digest(settings):
        return None
    started = time.time()
    with sync_lock(db_path, settings.bucket):
        if index_state(db_path) != saved.get("index"):
            return None
        files = FilesDigest()
        for item in walk(settings.roots, formats.extensions(settings), report_skips=True):  # as a sync walks
            files.add(item)
        if files.hexdigest() != saved.get("files"):
            return None
        stored = saved["report"]
        if not isinstance(stored, dict):
            return None
        report = _report(stored, started)
        record_finished_sync(db_path, report.to_dict(), None)
    return report


def _report(data: dict[str, Any], started: float) -> RunReport:
    def problems(entries: Iterable[dict[str, Any]]) -> list[FileProblem]:
        return [FileProblem.from_dict(e) for e in entries]

    return Tally(seen=data["seen"], unchanged=data["unchanged"], skipped=problems(data["skipped"]),
                 failed=problems(data["failed"]), rules_set_aside=problems(data.get("rulesSetAside", [])),
                 started_at=started).finish()


def _digest(parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")
                          ).hexdigest()
