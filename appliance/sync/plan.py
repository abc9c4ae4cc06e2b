"""What a sync decides before converting: which files changed, what a killed write left, which roots are gone."""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from appliance.chunks import Converted
from appliance.core import Resources
from appliance.errors import ApplianceError, Hint, IndexCorrupt, NextAction, RootsChanged
from appliance.ingest.chunk import SCHEME_VERSION, reconstruct
from appliance.ingest.discover import FoundFile
from appliance.results import HeldRoot
from appliance.storage.tables import SourceRow

MIN_HELD_LOSS = 10
"""A root that still has files is held only when at least this many of them would go at once (with
SYNC_DELETE_LIMIT): deleting a handful of files from a small folder by hand needs no flag."""
ALLOW_DELETIONS = NextAction("sync", "--allow-deletions")


def content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def classify(core: Resources, f: FoundFile, old: SourceRow | None, force: bool) -> tuple[str, str]:
    """(what to do, content hash): unchanged, refresh, failed, error (unreadable) or index."""
    fresh = (old if old is not None and not old.error_code and old.scheme == SCHEME_VERSION
             and old.model_id == core.spec.id else None)  # the row, when it is current
    if not force and fresh is not None and core.settings.change_detection == "stat" \
            and fresh.mtime_ns == f.mtime_ns and fresh.size == f.size:
        return "unchanged", fresh.content_hash
    try:
        digest = content_hash(f.path)
    except OSError as exc:
        return "error", exc.strerror or str(exc)
    if not force and fresh is not None and fresh.content_hash == digest:
        return "refresh", digest
    if not force and old is not None and old.error_code and old.content_hash == digest \
            and old.mtime_ns == f.mtime_ns:
        return "failed", digest
    return "index", digest


def check_roots(core: Resources, known: Iterable[SourceRow], *, forget: bool) -> None:
    """Refuse a sync that would delete every file of a root this process was not given.

    Files are keyed by absolute path, so the same folder mounted at another path (the
    host's ~/docs and the container's /docs) would be deleted and embedded again.
    """
    held = core.foreign_roots(known)
    if not held or forget:
        return
    roots = ", ".join(f"{root} ({count} files)" for root, count in sorted(held.items()))
    configured = ", ".join(str(r) for r in core.settings.roots)
    raise RootsChanged(
        f"The index at {core.settings.db_path} holds documents under {roots}, which is not among the "
        f"configured roots ({configured}); a sync would delete them and embed them again under the new path",
        hint=Hint("Give this process the documents at the path the index knows them by (BASE_DIRS, or the "
                  "container's -v HOST_FOLDER:/docs), use a separate DB_PATH per layout, or run {} to drop the "
                  "entries of roots that are gone for good.", NextAction("sync", "--forget-roots")))


def held_roots(core: Resources, known: Iterable[SourceRow], on_disk: set[str]) -> list[HeldRoot]:
    """The roots whose indexed files a whole-index sync must keep rather than delete.

    An unmounted share, a removed bind mount or a root the process may not read looks like
    a folder whose files were all deleted; a partly mounted one like most of them gone. A
    root the index holds files under is held when it is missing, unreadable or empty (nothing
    but hidden entries), or when more than SYNC_DELETE_LIMIT percent of its files (and at least MIN_HELD_LOSS)
    would go at once. Every sync path (CLI, scheduler, MCP, the hand-off, Ray) runs this
    through `indexing.sync`; `allow_deletions` there skips it.
    """
    held: list[HeldRoot] = []
    indexed = [row.source_id for row in known if row.source_kind == "file"]
    for root in core.settings.roots:
        mine = _under(root, indexed)
        if not mine:
            continue
        found = _under(root, on_disk)
        problem = _root_problem(root)
        lost = len(mine) - len(found)
        if problem is None and lost >= MIN_HELD_LOSS and lost * 100 > core.settings.sync_delete_limit * len(mine):
            problem = (f"has {len(found)} files where the index holds {len(mine)}, more than "
                       f"SYNC_DELETE_LIMIT={core.settings.sync_delete_limit}% gone at once")
        if problem is not None:
            held.append(HeldRoot(root=str(root), indexed_files=len(mine), found_files=len(found), reason=Hint(
                "the document root {} {}; its {} indexed files were kept instead of deleted (a share not mounted "
                "looks the same). If they really are gone, run {}",
                str(root), problem, str(len(mine)), ALLOW_DELETIONS)))
    return held


def _under(root: Path, paths: Iterable[str]) -> list[str]:
    prefix = str(root).rstrip("/") + "/"
    return [p for p in paths if p.startswith(prefix)]


def _root_problem(root: Path) -> str | None:
    if not root.is_dir():
        return "is missing or not a directory"
    if not os.access(root, os.R_OK | os.X_OK):
        return "cannot be read by this process"
    try:
        with os.scandir(root) as entries:
            visible = any(not entry.name.startswith(".") for entry in entries)  # DB_PATH may live in .minirag
    except OSError as exc:
        return f"cannot be listed ({exc.strerror or exc})"
    return None if visible else "is empty"


def items_to_keep(core: Resources, discard_unrecoverable: bool) -> list[tuple[SourceRow, Converted]]:
    """ingest_data and URL items with their text rebuilt from the stored chunks, for `sync --clean`.

    A rebuild from disk cannot bring them back, so when their text is unreadable the
    rebuild refuses and names them, unless told to discard them.
    """
    try:
        items = [s for s in core.index.registry.item_sources() if not s.error_code]
    except ApplianceError:
        items = []  # the sources table itself is unreadable: nothing can be named or kept
    if not items:
        return []
    try:
        by_source = core.index.reader.chunks_by_source(None)
    except ApplianceError as exc:
        if discard_unrecoverable:
            return []
        names = ", ".join(s.source_id for s in items[:20]) + (" …" if len(items) > 20 else "")
        raise IndexCorrupt(
            f"The stored text of {len(items)} ingest_data/URL items is unreadable ({exc.message}), so a "
            f"rebuild would lose them: {names}",
            hint=Hint("Re-ingest them after the rebuild, then run {}; files on disk are always rebuilt.",
                      NextAction("sync", "--clean --discard-unrecoverable"))) from exc
    kept = []
    for item in items:
        chunks = by_source.get(item.source_id)
        if not chunks:
            continue
        try:
            metadata = json.loads(item.metadata or "{}")
        except ValueError:
            metadata = {}
        text = reconstruct([c.to_chunk() for c in chunks])
        kept.append((item, Converted(markdown=text, title=item.title or None, ocr_engine=item.ocr_engine,
                                     has_lines=chunks[0].start_line is not None, metadata=metadata)))
    return kept


def rebuildable_in_place(core: Resources) -> bool:
    """True when both tables read whole and hold vectors of the configured size."""
    try:
        stored = core.index.read_identity()
        if stored is not None and stored.dim != core.spec.dim:
            return False
        core.index.writes.read_everything()
        return True
    except ApplianceError:
        return False


def inconsistent(core: Resources, known: dict[str, SourceRow], on_disk: set[str],
                  under: Path | None) -> tuple[frozenset[str], list[str]]:
    """What a killed write left behind: (files whose chunks differ from their source row, chunks of no source).

    A process killed between deleting a source's old chunks and recording it again
    (a re-ingest, a delete) leaves a source row that no longer matches the chunks;
    one killed before recording a new file leaves chunks without a row. Both are
    seen by counting chunks per source, so the next sync re-indexes or removes them.
    """
    counts = core.index.registry.chunk_counts()
    damaged = frozenset(sid for sid, row in known.items() if sid in on_disk
                        and counts.get(sid, 0) != (0 if row.error_code else row.chunk_count))
    stray = [sid for sid in counts if sid.startswith("/") and sid not in known and sid not in on_disk
             and (under is None or Path(sid) == under or Path(sid).is_relative_to(under))]
    if stray:
        recorded = core.index.registry.sources_by_id(stray)
        stray = [sid for sid in stray if sid not in recorded]
    return damaged, stray
