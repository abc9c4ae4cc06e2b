"""Reading what is indexed: a document, the chunks around a hit, the files and their states, exact-match grep."""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.assemble.paging import MAX_PAGE_CHARS, READ_PAGE_CHARS, text_page
from appliance.assemble.passages import passage
from appliance.core import Resources
from appliance.errors import Hint, InvalidArgument, NextAction, NotFound
from appliance.ingest.chunk import reconstruct
from appliance.ingest.convert_pdf import pages_left_without_ocr
from appliance.ingest.discover import RULES_SET_ASIDE, FoundFile, Skipped, display_of, printable, walk
from appliance.results import (
    ChangedFile,
    Document,
    FailedFile,
    FileList,
    FileState,
    GrepResults,
    IndexedFile,
    ItemState,
    MissingFile,
    Neighbors,
    NewFile,
    SkippedFile,
)
from appliance.storage.tables import SourceRow

if TYPE_CHECKING:
    from appliance.search.grep import Coverage, GrepDoc


GREP_BATCH_CHUNKS = 2000
"""Chunks grep reads from the index in one go (a few MB of text), so memory stays bounded."""


def read(core: Resources, target: str, is_source: bool = False, *, require_absolute: bool = False,
         offset: int = 0, max_chars: int | None = None, revision: str | None = None,
         start_line: int | None = None, end_line: int | None = None,
         page_start: int | None = None, page_end: int | None = None) -> Document:
    """A document rebuilt from its chunks (no repeated breadcrumbs or headers), whole or one page.

    A page is at most `max_chars` characters from `offset`, cut at a line end when one
    lies in its second half; `next_offset` continues it (None at the end). `revision`
    names the text the offsets count in: a page asked with another document's or an
    older revision is refused, so a reader never stitches two versions together.

    `start_line`/`end_line` (sources with lines) or `page_start`/`page_end` (PDFs and
    scans; slides of a presentation) read only that part (1-based, inclusive; either
    bound may be left out); offsets then count in that part's text, and the revision
    is still the whole document's.
    """
    from appliance.assemble.ranges import check_range, line_range, page_range

    lines = start_line is not None or end_line is not None
    pages = page_start is not None or page_end is not None
    if lines and pages:
        raise InvalidArgument("Give a line range or a page range, not both")
    check_range(("startLine", "endLine"), start_line, end_line)
    check_range(("pageStart", "pageEnd"), page_start, page_end)
    source_id = core.source_id_for(target, is_source, require_absolute=require_absolute)
    core.index.checkout_latest()  # every read sees what any process committed before it began
    chunks = core.index.reader.document_chunks(source_id)
    if not chunks:
        why = not_indexed_reason(core, source_id)
        if why is not None:
            raise NotFound(f"{source_id} is not indexed: {why}",
                           hint=Hint("A sync will not index it as it is; {} names every file left out and why.",
                                     NextAction("list")))
        raise NotFound(f"Nothing indexed for {source_id}",
                       hint=Hint("Run {} (or ingest the file) first; {} shows what is indexed.", NextAction("sync"),
                                 NextAction("list")))
    chunks.sort(key=lambda c: c.chunk_index)
    content = reconstruct([c.to_chunk() for c in chunks])
    current = hashlib.sha1(f"{source_id}\0{content}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if revision is not None and revision != current:
        raise InvalidArgument(f"revision {revision!r} is not the indexed text of {source_id} (now {current}): "
                              "the document changed or the revision belongs to another one",
                              hint="Read again from offset 0 without a revision.")
    span = line_range(source_id, chunks, start_line, end_line) if lines else \
        page_range(source_id, chunks, page_start, page_end) if pages else None
    text = span.content if span is not None else content
    page, next_offset = text_page(text, offset, max_chars)
    ranged = {f.name: getattr(span, f.name) for f in fields(span) if f.name != "content"} if span else {}
    first = chunks[0]
    return Document(source=source_id, source_kind=first.source_kind, display_path=first.path,
                    title=first.title or None, chunk_count=len(chunks), content=page, offset=offset,
                    total_chars=len(text), next_offset=next_offset,
                    remaining_chars=len(text) - (next_offset if next_offset is not None else len(text)),
                    revision=current, **ranged)


def not_indexed_reason(core: Resources, source_id: str) -> str | None:
    """Why a file under the roots has no indexed text that a sync would not change (failed, not a type
    indexed, ignored by a rules file, unreadable), or None: a new file, or no such file."""
    recorded = core.index.registry.source(source_id)
    if recorded is not None and recorded.error_code:
        return f"indexing it failed ({recorded.error_code}): {recorded.error}"
    path = Path(source_id)
    if not path.is_absolute() or not path.is_file():
        return None
    for item in walk(core.settings.roots, core.extensions(), under=path.parent, report_skips=True):
        if isinstance(item, Skipped) and item.code != RULES_SET_ASIDE and (
                item.path == path or path.is_relative_to(item.path)):
            return item.reason
        if item.path == path:
            return None
    return None


def read_neighbors(core: Resources, target: str, is_source: bool, chunk_index: int, *, before: int = 2, after: int = 2,
                   require_absolute: bool = False, max_chars: int = READ_PAGE_CHARS) -> Neighbors:
    """The chunks around one hit, in document order, within `max_chars` of text.

    The hit's own chunk always comes; the others are taken nearest first, alternating
    after and before, while their text fits. `omittedBefore`/`omittedAfter` count
    the requested chunks left out (ask again from the first/last chunk returned)."""
    for name, value, low, cap in (("chunkIndex", chunk_index, 0, 10**9), ("before", before, 0, 50),
                                  ("after", after, 0, 50), ("maxChars", max_chars, 1, MAX_PAGE_CHARS)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= cap:
            raise InvalidArgument(f"{name} must be an integer from {low} to {cap}, not {value!r}")
    source_id = core.source_id_for(target, is_source, require_absolute=require_absolute)
    core.index.checkout_latest()
    around = core.index.reader.chunks_around(source_id, chunk_index - before, chunk_index + after)
    if chunk_index not in around:
        raise NotFound(f"{source_id} has no chunk {chunk_index}")
    kept, used = {chunk_index}, len(around[chunk_index].text)
    nearest = sorted((i for i in around if i != chunk_index), key=lambda i: (abs(i - chunk_index), i < chunk_index))
    for i in nearest:
        if used + len(around[i].text) > max_chars:
            break
        kept.add(i)
        used += len(around[i].text)
    return Neighbors(source=source_id, chunk_index=chunk_index,
                     chunks=[passage(around[i]) for i in sorted(kept)],
                     omitted_before=sum(1 for i in around if i < chunk_index and i not in kept),
                     omitted_after=sum(1 for i in around if i > chunk_index and i not in kept))


def list_files(core: Resources, *, scope: str | None = None, include_ignored: bool = False,
               require_absolute: bool = False, limit: int | None = None, cursor: str | None = None) -> FileList:
    """Every file under the roots with its state, then the indexed data and URL sources, in pages.

    Files come sorted by path, then sources by id; a page holds at most `limit` entries of
    both (None: all of them) and `next_cursor` continues after the last one (None at the end).
    """
    from appliance.assemble.paging import cursor_key, page_after

    under = core.resolve(scope, require_absolute=require_absolute)[0] if scope else None
    core.index.checkout_latest()
    known = {s.source_id: s for s in core.index.registry.source_rows()}
    files: list[FileState] = []
    for item in walk(core.settings.roots, core.extensions(), under=under, report_skips=include_ignored):
        if isinstance(item, Skipped):
            if item.code == RULES_SET_ASIDE:
                continue  # the root is indexed; status and the sync report name the rules set aside
            files.append(SkippedFile(file_path=printable(item.path), state=item.code, reason=item.reason,
                                     display_path=display_of(item.path, core.settings.roots)))
            continue
        old = known.pop(str(item.path), None)
        files.append(_file_state(item, old))
    others = []
    for s in known.values():
        if s.source_kind == "file":
            if under is None or Path(s.source_id).is_relative_to(under):
                files.append(MissingFile(file_path=s.source_id, display_path=s.path or s.source_id,
                                         chunk_count=s.chunk_count))
        else:
            others.append(ItemState(source=s.source_id, source_kind=s.source_kind, title=s.title or None,
                                    chunk_count=s.chunk_count, ingested_at=s.ingested_at))
    return page_after(files, others, scope=scope, limit=limit, cursor=cursor, key=cursor_key(core.settings.db_path))


def grep(core: Resources, pattern: str, *, regex: bool = False, case_sensitive: bool = False, scope: str | None = None,
         root: str | None = None, file_glob: str | None = None, max_results: int = 100,
         require_absolute: bool = False) -> GrepResults:
    """Matching lines in the indexed text of every indexed document: files of every format
    (PDF, Office, EPUB, OCRed scans, text), ingest_data items and fetched pages.

    Filters: `scope` (a path under the roots), `root` (a configured root, by path or by
    list_roots' name), `file_glob` (on the display path). Files on disk that are not
    indexed (new, or failed to convert) have no indexed text and are not searched: the
    result counts them, with a note, instead of leaving them out silently.
    """
    from appliance.search.grep import check_max_results, compile_pattern, grep, path_glob

    compile_pattern(pattern, is_regex=regex, case_sensitive=case_sensitive)
    check_max_results(max_results)
    under = core.resolve(scope, require_absolute=require_absolute)[0] if scope else None
    root_path = _root_named(core, root) if root is not None else None
    matches = path_glob(file_glob) if file_glob is not None else None

    def selected(kind: str, source_id: str, root_of: str, display: str) -> bool:
        if (under is not None or root_path is not None) and kind != "file":
            return False
        return ((under is None or Path(source_id) == under or Path(source_id).is_relative_to(under))
                and (root_path is None or root_of == str(root_path))
                and (matches is None or matches(display)))

    core.index.checkout_latest()
    known = {s.source_id: s for s in core.index.registry.source_rows()}
    indexed = sorted((s for s in known.values()
                      if not s.error_code and selected(s.source_kind, s.source_id, s.root, s.path)),
                     key=lambda s: s.source_id)
    coverage = _grep_coverage(core, known, len(indexed), under or root_path, selected)
    scan = grep(_grep_documents(core, indexed), pattern, is_regex=regex, case_sensitive=case_sensitive,
                max_results=max_results)
    return scan.results(**coverage)


def _grep_documents(core: Resources, sources: Sequence[SourceRow]) -> Iterator[GrepDoc]:
    """The documents' texts from their stored chunks, read a bounded batch at a time."""
    from appliance.search.grep import GrepDoc, describe

    batch: list[SourceRow] = []
    chunks = 0
    for n, source in enumerate(sources):
        batch.append(source)
        chunks += max(1, source.chunk_count)
        if chunks < GREP_BATCH_CHUNKS and len(batch) < 200 and n + 1 < len(sources):
            continue
        by_source = core.index.reader.chunks_by_source([s.source_id for s in batch])
        for s in batch:
            mine = by_source.get(s.source_id)
            yield GrepDoc.from_chunks(mine) if mine else GrepDoc.empty(
                describe(s.source_id, s.source_kind, s.path, s.title))
        batch, chunks = [], 0


def _grep_coverage(core: Resources, known: dict[str, SourceRow], indexed: int, under: Path | None,
                   selected: Callable[[str, str, str, str], bool]) -> Coverage:
    """What grep cannot search among the files the filters select: new (not indexed yet) and
    failed files, and changed ones (searched as last indexed), with a sentence saying so."""
    new = failed = changed = 0
    if under is not None and under.is_file():
        under = under.parent  # the scan's own view of the file: its extension, the ignore rules
    for item in walk(core.settings.roots, core.extensions(), under=under):
        if not isinstance(item, FoundFile) or not selected("file", str(item.path), str(item.root), item.display):
            continue
        old = known.get(str(item.path))
        if old is None:
            new += 1
        elif old.error_code:
            failed += 1
        elif (old.mtime_ns, old.size) != (item.mtime_ns, item.size):
            changed += 1
    notes = []
    if new or failed:
        notes.append(f"{new + failed} file(s) under the roots have no indexed text and were not searched "
                     f"({new} not indexed yet, {failed} failed to index; list_files names them)")
    if changed:
        notes.append(f"{changed} file(s) changed on disk since indexing and were searched as last indexed")
    if new or changed:
        notes.append("a sync (sync_start, or `minirag sync`) indexes them")
    if not indexed and not notes:
        notes.append("no indexed document matches the filters")
    note = "; ".join(notes) + "." if notes else None
    return {"documents_indexed": indexed, "unindexed_files": new, "failed_files": failed, "stale_files": changed,
            "note": note[0].upper() + note[1:] if note else None}


def _root_named(core: Resources, root: str) -> Path:
    """The configured root `root` names: its path (as configured, or resolved) or its list_roots name."""
    from appliance.ingest.discover import root_names

    roots = core.settings.roots
    names = root_names(roots)
    if isinstance(root, str) and root.strip() and "\x00" not in root:
        text = root.strip()
        for path, name in zip(roots, names, strict=True):
            if text == name:
                return path
        if text.startswith(("/", "~")):
            given: Path | None
            real: Path | None
            try:
                given = Path(os.path.normpath(Path(text).expanduser()))
                real = given.resolve()
            except (RuntimeError, OSError):  # ~user without a home, a link loop: no root
                given = real = None
            for path in roots:
                if path in (given, real):
                    return path
    listed = ", ".join(f"{name} ({path})" for name, path in zip(names, roots, strict=True))
    raise InvalidArgument(f"root {root!r} is not one of the configured roots", hint=f"The roots: {listed}.")


def _file_state(found: FoundFile, old: SourceRow | None) -> FileState:
    path, display, size = str(found.path), found.display, found.size
    if old is None:
        return NewFile(file_path=path, display_path=display, size=size)
    if old.error_code:
        return FailedFile(file_path=path, display_path=display, size=size, reason=old.error, code=old.error_code)
    if old.mtime_ns != found.mtime_ns or old.size != found.size:
        return ChangedFile(file_path=path, display_path=display, size=size, chunk_count=old.chunk_count)
    try:
        missing = pages_left_without_ocr(json.loads(old.metadata or "{}"))
    except ValueError:
        missing = None
    return IndexedFile(file_path=path, display_path=display, size=size, chunk_count=old.chunk_count,
                       title=old.title or None, ocr_engine=old.ocr_engine, doc_class=old.doc_class,
                       reason=missing or None)
