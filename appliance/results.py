"""What the service returns: records the CLI and the MCP server render in their own (camelCase) shapes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal


@dataclass(frozen=True)
class FileProblem:
    """A file a run skipped (a skip code such as ignored, broken_link) or failed to index (an error code)."""

    path: str
    code: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "code": self.code, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> FileProblem:
        return cls(data["path"], data["code"], data["reason"])


ABSENT_WHEN_NONE = "absent_when_none"
"""Field metadata: the wire shape leaves the key out when the value is None (wire.to_wire)."""
NULL_IN_TOOLS = "null_in_tools"
"""Field metadata, with ABSENT_WHEN_NONE: the MCP tools' results still carry the key (as null);
only the CLI's JSON leaves it out."""
_ABSENT = {ABSENT_WHEN_NONE: True}
_NULL_IN_TOOLS = {ABSENT_WHEN_NONE: True, NULL_IN_TOOLS: True}


@dataclass(frozen=True)
class Doc:
    """A field's description for clients, `Annotated[int, Doc("...")]`: the tools' output schemas
    (mcp_models, generated from these records) carry it."""

    text: str


@dataclass(frozen=True, kw_only=True)
class HeldRoot:
    """A root whose indexed files a sync kept instead of deleting: it is missing, unreadable, empty or
    lost most of its files at once (sync_plan.held_roots); `--allow-deletions` accepts the loss."""

    root: str
    indexed_files: Annotated[int, Doc("Files the index holds under the root (all kept).")]
    found_files: Annotated[int, Doc("Files the sync found under the root now.")]
    reason: Annotated[str, Doc("What is wrong with the root and how to accept the deletion.")]

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "indexedFiles": self.indexed_files, "foundFiles": self.found_files,
                "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HeldRoot:
        return cls(root=data["root"], indexed_files=data["indexedFiles"], found_files=data["foundFiles"],
                   reason=data["reason"])


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """What an ingest or sync did; counts add up to what it saw."""

    seen: Annotated[int, Doc("Files or items looked at.")]
    added: int
    updated: int
    unchanged: int
    refreshed: Annotated[int, Doc("Unchanged content whose file metadata was refreshed.")] = 0
    deleted: int = 0
    skipped_count: int = 0
    failed_count: int = 0
    skipped: list[FileProblem] = field(default_factory=list)
    failed: list[FileProblem] = field(default_factory=list)
    rules_set_aside: Annotated[list[FileProblem], Doc(
        "Roots indexed although an enclosing repository's rules ignore them: the rules file set aside.")] \
        = field(default_factory=list)
    chunks: Annotated[int, Doc("Chunks written.")] = 0
    chunks_embedded: Annotated[int, Doc("Chunks whose text went to the embedding model.")] = 0
    chunks_reused: Annotated[int, Doc(
        "Chunks whose text the index had embedded before (same model and scheme): the stored vector was reused.")] = 0
    seconds: float = 0.0
    started_at: float = field(default_factory=time.time)
    held_roots: Annotated[list[HeldRoot], Doc(
        "Roots whose indexed files were kept, not deleted: missing, unreadable, empty or most files gone at "
        "once. Run the sync again with allowDeletions (CLI: --allow-deletions) to accept the deletion.")] \
        = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.held_roots

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        """The report `to_dict` gave (one another process sent)."""
        def problems(key: str) -> list[FileProblem]:
            return [FileProblem.from_dict(e) for e in data[key]]

        return cls(seen=data["seen"], added=data["added"], updated=data["updated"], unchanged=data["unchanged"],
                   refreshed=data["refreshed"], deleted=data["deleted"], skipped_count=data["skippedCount"],
                   failed_count=data["failedCount"], skipped=problems("skipped"), failed=problems("failed"),
                   rules_set_aside=[FileProblem.from_dict(e) for e in data.get("rulesSetAside", [])],
                   chunks=data["chunks"], chunks_embedded=data["chunksEmbedded"], chunks_reused=data["chunksReused"],
                   seconds=data["seconds"], started_at=data["startedAt"],
                   held_roots=[HeldRoot.from_dict(h) for h in data.get("heldRoots", ())])

    def to_dict(self) -> dict[str, Any]:
        """The stored form (the last-sync record, the sync stamp, a job's counts): the wire shape too."""
        return {"seen": self.seen, "added": self.added, "updated": self.updated,
                "unchanged": self.unchanged, "refreshed": self.refreshed, "deleted": self.deleted,
                "skippedCount": self.skipped_count, "failedCount": self.failed_count,
                "skipped": [s.to_dict() for s in self.skipped], "failed": [f.to_dict() for f in self.failed],
                "rulesSetAside": [r.to_dict() for r in self.rules_set_aside],
                "chunks": self.chunks, "chunksEmbedded": self.chunks_embedded, "chunksReused": self.chunks_reused,
                "seconds": self.seconds, "startedAt": self.started_at,
                "heldRoots": [h.to_dict() for h in self.held_roots]}


@dataclass
class Tally:
    """What an ingest or sync counts while it runs (progress reads it); `finish` gives its RunReport."""

    seen: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    refreshed: int = 0
    deleted: int = 0
    skipped: list[FileProblem] = field(default_factory=list)
    failed: list[FileProblem] = field(default_factory=list)
    rules_set_aside: list[FileProblem] = field(default_factory=list)
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    files_stored: int = 0
    """Files whose chunks (or failure record) are written: what progress counts as done."""
    chunks_cut: int = 0
    """Chunks cut from converted files, written or still waiting for the model."""
    started_at: float = field(default_factory=time.time)
    held_roots: list[HeldRoot] = field(default_factory=list)

    def finish(self) -> RunReport:
        """The run's report, timed from `started_at` until now."""
        return RunReport(seen=self.seen, added=self.added, updated=self.updated, unchanged=self.unchanged,
                         refreshed=self.refreshed, deleted=self.deleted, skipped_count=len(self.skipped),
                         failed_count=len(self.failed), skipped=list(self.skipped), failed=list(self.failed),
                         rules_set_aside=list(self.rules_set_aside),
                         chunks=self.chunks, chunks_embedded=self.embedded, chunks_reused=self.reused,
                         seconds=round(time.time() - self.started_at, 3), started_at=self.started_at,
                         held_roots=list(self.held_roots))


JobPhase = Literal["queued", "scanning", "indexing", "succeeded", "failed", "cancelled"]


@dataclass(frozen=True, kw_only=True)
class SyncJob:
    """A background job (a sync, or an ingest too large for one call) as it is now."""

    job_id: Annotated[str, Doc("Poll sync_status with it until phase is succeeded or failed.")]
    kind: Annotated[Literal["sync", "ingest_data", "ingest_url"], Doc(
        "sync_start's reconcile, or an ingest too large to finish within the call.")] = "sync"
    path: str | None = None
    source: Annotated[str | None, Doc("The source id an ingest job writes (null for a sync).")] = None
    phase: JobPhase
    files_done: int
    files_total: int
    current_path: str | None = None
    progress: Annotated[dict[str, Any] | None, Doc(
        "While the job's sync runs: its chunks written of chunksTotal, rate and etaSeconds (as status shows).")] \
        = None
    started_at: float
    finished_at: float | None = None
    elapsed_seconds: float
    failures: Annotated[list[FileProblem], Doc("Files that could not be indexed, with the reason.")] \
        = field(default_factory=list)
    counts: Annotated[dict[str, Any] | None, Doc("Final counts once the job has succeeded.")] = None
    """RunReport.to_dict without the skipped and failed files."""
    error: Annotated[dict[str, Any] | None, Doc("Why the whole job failed (phase 'failed').")] = None
    """ApplianceError.to_dict: code, message, hint."""
    held_roots: Annotated[list[HeldRoot], Doc(
        "Roots whose files the sync kept instead of deleting (missing, empty, or most files gone at once); "
        "sync_start with allowDeletions accepts the deletion.")] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Deleted:
    """What `delete` removed."""

    source: str
    deleted: bool = True
    chunks_removed: int


@dataclass(frozen=True, kw_only=True)
class RootCounts:
    """One configured root: its name, path and indexed/failed files (None when the index is unreadable)."""

    name: Annotated[str, Doc("Short name (the folder's name); grep's root accepts it or the path.")]
    path: Annotated[str, Doc("Absolute path of the root.")]
    exists: bool
    indexed_files: Annotated[int | None, Doc("Files of this root in the index (null: index unreadable).")] = None
    failed_files: Annotated[int | None, Doc("Files of this root that failed to index.")] = None


@dataclass(frozen=True, kw_only=True)
class RootList:
    """The configured roots with their counts, and the ingest_data and URL items (which belong to no root)."""

    roots: list[RootCounts]
    data_sources: Annotated[int | None, Doc("ingest_data items (they belong to no root).")] = None
    url_sources: Annotated[int | None, Doc("ingest_url pages (they belong to no root).")] = None
    index_error: Annotated[dict[str, Any] | None, Doc("Set when the index could not be read for the counts.")] \
        = field(default=None, metadata=_NULL_IN_TOOLS)
    unconfigured_roots: Annotated[dict[str, int] | None, Doc(
        "Roots the index holds files of that this server was not given, with their file counts.")] \
        = field(default=None, metadata=_NULL_IN_TOOLS)
    """Roots of indexed files that are not configured, with their file counts (None: there are none)."""


@dataclass(frozen=True, kw_only=True)
class Neighbors:
    """The chunks around one hit, in document order, and how many asked for were left out."""

    source: str
    chunk_index: int
    chunks: list[Hit]
    omitted_before: Annotated[int, Doc("Requested chunks before the hit left out to stay within maxChars.")]
    omitted_after: Annotated[int, Doc("Requested chunks after the hit left out to stay within maxChars.")]


@dataclass(frozen=True, kw_only=True)
class SyncActivity:
    """The sync running on this index now (whoever started it), the last finished one, and this process's jobs."""

    running: Annotated[dict[str, Any] | None, Doc("Null when no sync runs.")]
    last_sync: Annotated[dict[str, Any] | None, Doc("The last finished sync's counts and failures.")]
    jobs: Annotated[list[SyncJob], Doc("This server's recent background jobs, newest first.")]


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    id: str
    dim: int
    max_seq_length: int
    baked: bool
    """Whether the model's files are in the models directory."""


@dataclass(frozen=True, kw_only=True)
class IndexHealth:
    """What the index holds and what is wrong with it; the warnings say what to run."""

    db_path: str
    source_count: int
    failed_count: int
    unconfigured_roots: dict[str, int] | None = field(default=None, metadata=_ABSENT)
    roots_warning: str | None = field(default=None, metadata=_ABSENT)
    chunk_count: int
    unindexed_rows: int
    has_keyword_index: bool
    has_vector_index: bool
    query_path: str
    """"memory" (the exact in-memory replica) or "index" (LanceDB's indexes), by the memory it takes."""
    stale_chunk_count: int
    scheme_warning: str | None = field(default=None, metadata=_ABSENT)
    identity: dict[str, Any] | None
    """store.Identity's fields as stored (snake_case on the wire too)."""
    consistency_warning: str | None = field(default=None, metadata=_ABSENT)
    identity_warning: str | None = field(default=None, metadata=_ABSENT)
    identity_mismatch: str | None = field(default=None, metadata=_ABSENT)
    identity_hint: str | None = field(default=None, metadata=_ABSENT)


@dataclass(frozen=True, kw_only=True)
class FirstSync:
    """Why the index is still empty (or was never synced whole) and when a sync will fill it."""

    starts_at: Annotated[float | None, Doc(
        "When the first sync starts (epoch seconds; the latest moment when only a bound is known); "
        "null when nothing has scheduled one.")] = None
    starts_in_seconds: Annotated[float | None, Doc("Seconds from now until starts_at (0: due now).")] = None
    message: Annotated[str, Doc("What is pending, who will run it, or how to start it.")]


@dataclass(frozen=True, kw_only=True)
class Status:
    """Configuration and index health; `index_error` instead of `index` when the index cannot be read."""

    version: str
    config: dict[str, Any]
    ocr: str
    ocr_hint: str | None = field(default=None, metadata=_ABSENT)
    model: ModelInfo
    chunk_token_budget: int | None = field(default=None, metadata=_ABSENT)
    index: IndexHealth | None = field(default=None, metadata=_ABSENT)
    index_error: dict[str, Any] | None = field(default=None, metadata=_ABSENT)
    sync_running: Annotated[dict[str, Any] | None, Doc("The sync running now (any process), with progress.")]
    scheduler: dict[str, Any] | None
    last_sync: Annotated[dict[str, Any] | None, Doc("The last finished sync's report.")]
    ignore_problems: list[Any]
    first_sync: Annotated[FirstSync | None, Doc(
        "Set while the index is empty or was never synced whole and no sync runs: when the first sync "
        "starts, or how to start one.")] = field(default=None, metadata=_NULL_IN_TOOLS)
    dictionaries: Annotated[dict[str, Any] | None, Doc(
        "The cross-language dictionaries: loaded (with their language pairs), or unavailable with the error and "
        "how to bake them (search then runs without translation and compound splitting).")] \
        = field(default=None, metadata=_ABSENT)


@dataclass(frozen=True, kw_only=True)
class Document:
    """A document rebuilt from its chunks: one page of it (`next_offset` continues, None at the end),
    or of the lines or pages asked for (the fields of that range are set, the others None)."""

    source: str
    source_kind: str
    display_path: str
    title: str | None
    chunk_count: int
    content: Annotated[str, Doc("The document as Markdown, rebuilt from its chunks: this page of it.")]
    offset: int
    total_chars: int
    next_offset: Annotated[int | None, Doc(
        "Where the next page starts: call read_file again with offset=nextOffset and the same revision; "
        "null when this page reaches the end.")]
    remaining_chars: int
    revision: Annotated[str, Doc("Names the text the offsets count in; pass it back with offset.")]
    """Names the whole document's text; a page asked with another revision is refused."""
    start_line: Annotated[int | None, Doc("With a line range: the first line returned.")] \
        = field(default=None, metadata=_NULL_IN_TOOLS)
    end_line: Annotated[int | None, Doc("With a line range: the last line returned (clipped to the end).")] \
        = field(default=None, metadata=_NULL_IN_TOOLS)
    total_lines: Annotated[int | None, Doc("With a line range: the document's last line.")] \
        = field(default=None, metadata=_NULL_IN_TOOLS)
    page_unit: Annotated[Literal["page", "slide"] | None, Doc("With a page range: pages or slides.")] \
        = field(default=None, metadata=_NULL_IN_TOOLS)
    page_start: Annotated[int | None, Doc(
        "With a page range: the first page the returned text comes from (whole passages, so it may "
        "start on the page before the one asked for).")] = field(default=None, metadata=_NULL_IN_TOOLS)
    page_end: Annotated[int | None, Doc("With a page range: the last page the returned text comes from.")] \
        = field(default=None, metadata=_NULL_IN_TOOLS)
    total_pages: Annotated[int | None, Doc("With a page range: the last page (or slide) with text.")] \
        = field(default=None, metadata=_NULL_IN_TOOLS)


@dataclass(frozen=True, kw_only=True)
class Passage:
    """A stored chunk as a hit shows it: its document, its place in it and its text."""

    file_path: Annotated[str | None, Doc("Absolute path for files; null for data/url sources.")] = None
    source: str
    source_kind: str
    display_path: Annotated[str, Doc("Path relative to its root (or the source id): use it in citations.")]
    title: str | None = None
    chunk_index: int
    text: Annotated[str, Doc("The matched passage only; the full section is parents[parentId].")]
    parent_id: str | None = None
    heading: str | None = None
    start_line: Annotated[int | None, Doc("First line in the source file (text files only).")] = None
    end_line: int | None = None
    page_start: Annotated[int | None, Doc("First PDF page (1-based) of the passage; cite it.")] = None
    page_end: Annotated[int | None, Doc("Last PDF page of the passage.")] = None
    slide: Annotated[int | None, Doc("Slide number of a presentation's passage.")] = None
    sheet: Annotated[str | None, Doc("Sheet name of a workbook's passage.")] = None
    doc_class: str | None = None
    also_in: Annotated[list[dict[str, Any]] | None, Doc(
        "Other places holding the same passage (source, displayPath, chunkIndex and its location); "
        "collapsed into this hit so the results are distinct passages.")] = None
    """query.distinct's places of the copies, for a search hit; always None around a hit."""


@dataclass(frozen=True, kw_only=True)
class _Ranking:
    score: float | None = None
    distance: float | None = None
    """None when only the keyword side found the passage."""
    explain: Annotated[dict[str, Any] | None, Doc(
        "With explain: vectorRank and keywordRank (1-based among that side's candidates; null where the side "
        "did not find the passage) and `matched`, the query terms the passage holds, each with its kind: the "
        "query's own word, a translation (with its dictionary and language pair) or a compound part.")] \
        = field(default=None, metadata=_ABSENT)


@dataclass(frozen=True, kw_only=True)
class _Snapshot:
    snapshot_date: str | None = field(default=None, metadata=_ABSENT)
    also_unchanged_on: list[str] | None = field(default=None, metadata=_ABSENT)
    """The dates of the later snapshots this dated passage is unchanged in (set with snapshot_date)."""


# Bases are listed so the fields come in wire order: a Passage's, the ranking's, the snapshot's.
@dataclass(frozen=True, kw_only=True)
class Hit(_Snapshot, Passage):
    """A chunk read around a hit (read_chunk_neighbors): a passage without a ranking."""


@dataclass(frozen=True, kw_only=True)
class RankedHit(_Snapshot, _Ranking, Passage):
    """A search hit: the passage with its fused score and vector distance."""


@dataclass(frozen=True, kw_only=True)
class SourceRef:
    """A document some hit comes from, once per document."""

    source: str
    display_path: str
    title: str | None = None
    source_kind: str


@dataclass(frozen=True, kw_only=True)
class SearchResults:
    """Hits in rank order, each parent section's text once, and the documents they come from."""

    query: str
    results: list[RankedHit]
    parents: Annotated[dict[str, str], Doc(
        "parentId -> the section the hit sits in: the text around the hits (sections \"excerpt\", the default: "
        "[hit chunk N] stands for the hit's own text, [...] for text left out), whole (\"full\"), or empty "
        "(\"none\").")]
    sources: list[SourceRef] = field(default_factory=list)
    sections: Annotated[Literal["excerpt", "full", "none"], Doc("How much of each section parents holds.")] \
        = "full"
    excerpted: Annotated[list[str] | None, Doc(
        "parentIds whose text in parents is only the part around the hits: ask again with sections \"full\", "
        "or read on with read_chunk_neighbors / read_file.")] = None
    trimmed: Annotated[dict[str, Any] | None, Doc(
        "Set when the reply was cut to its text budget: how many parent sections and hits were left out.")] \
        = field(default=None, metadata=_NULL_IN_TOOLS)


@dataclass(frozen=True, kw_only=True)
class GrepMatch:
    """One matching line and where it is: the line (sources with lines), else the chunk's pages, slide or sheet."""

    source: Annotated[str, Doc("The file path or the data/url source id: pass it to read_file.")]
    source_kind: str
    file_path: Annotated[str | None, Doc("Absolute path for files; null for data/url sources.")] = None
    display_path: Annotated[str, Doc("Path relative to its root (or the source id): use it in citations.")]
    title: str | None = None
    chunk_index: Annotated[int, Doc("The chunk the match is in: read_chunk_neighbors reads around it.")]
    heading: Annotated[str | None, Doc("The section the match is in (heading path, slide, sheet).")] = None
    page_start: Annotated[int | None, Doc("First page of the passage the match is in (PDF, scans).")] = None
    page_end: Annotated[int | None, Doc("Last page of that passage; equal to pageStart on one page.")] = None
    slide: Annotated[int | None, Doc("Slide number (presentations).")] = None
    sheet: Annotated[str | None, Doc("Sheet name (workbooks).")] = None
    line_number: Annotated[int | None, Doc(
        "Line in the source (text, Markdown, JSON files; text/Markdown items); null for converted formats.")] = None
    line: Annotated[str, Doc("The matching line of the indexed text (at most 400 characters around the match).")]


@dataclass(frozen=True, kw_only=True)
class GrepResults:
    """grep's matches in document order, what was searched, and what could not be (with a note saying so)."""

    pattern: str
    regex: bool
    matches: list[GrepMatch]
    match_count: int
    documents_searched: Annotated[int, Doc("Indexed documents searched (files, data and url items).")]
    files_searched: Annotated[int, Doc("Of them, files.")]
    documents_indexed: Annotated[int, Doc(
        "Indexed documents the filters select: all of them were searched unless truncated or stopped.")]
    unindexed_files: Annotated[int, Doc(
        "Files under the roots (within the filters) not indexed yet: not searched.")] = 0
    failed_files: Annotated[int, Doc("Files that failed to index (no text): not searched.")] = 0
    stale_files: Annotated[int, Doc("Files changed on disk since indexing: searched as last indexed.")] = 0
    note: Annotated[str | None, Doc("What was not searched and what to do about it, in a sentence.")] = None
    truncated: Annotated[bool, Doc("True when maxResults was reached before every document was searched.")]
    stopped: Annotated[Literal["deadline", "regex_timeout"] | None, Doc(
        "Why the scan was cut short, if it was; the matches so far are still returned.")] = None
    skipped: list[dict[str, str]] = field(default_factory=list)
    seconds: float


@dataclass(frozen=True, kw_only=True)
class SearchMarkdown:
    """`search`'s answer as one Markdown block (gather)."""

    query: str
    result_count: int
    markdown: Annotated[str, Doc("Numbered hits with their citations and surrounding lines.")]


MISSING_REASON = (
    "indexed, but no longer on disk; the next sync removes it (unless its root is missing, empty or lost most "
    "of its files: then only a sync with --allow-deletions does)")


@dataclass(frozen=True, kw_only=True)
class SkippedFile:
    """A file the scan left out, not indexed: its skip code is its state (unsupported, unreadable,
    broken_link ...; ignored only with include_ignored) and `reason` says why."""

    file_path: str
    display_path: Annotated[str, Doc("Path relative to its root.")]
    state: Annotated[str, Doc(
        "new, indexed, changed, failed, missing, or a skip code: unsupported (not a type indexed), "
        "ignored (by the rules file the reason names), unreadable, broken_link, invalid_name.")]
    reason: str


@dataclass(frozen=True, kw_only=True)
class MissingFile:
    """An indexed file no longer on disk."""

    file_path: str
    display_path: Annotated[str, Doc("Path relative to its root, as it was indexed: use it in citations.")]
    state: Literal["missing"] = "missing"
    chunk_count: int
    reason: str = MISSING_REASON


@dataclass(frozen=True, kw_only=True)
class _OnDisk:
    file_path: str
    display_path: str
    size: int


@dataclass(frozen=True, kw_only=True)
class NewFile(_OnDisk):
    """On disk, never indexed."""

    state: Literal["new"] = "new"
    reason: str | None = field(default=None, metadata=_NULL_IN_TOOLS)
    """Always None; list_files' entries all have the key (null when there is nothing to say)."""


@dataclass(frozen=True, kw_only=True)
class FailedFile(_OnDisk):
    """Indexing it failed: the error code and message."""

    state: Literal["failed"] = "failed"
    reason: str
    code: str


@dataclass(frozen=True, kw_only=True)
class ChangedFile(_OnDisk):
    """Changed on disk since it was indexed."""

    state: Literal["changed"] = "changed"
    chunk_count: int
    reason: str | None = field(default=None, metadata=_NULL_IN_TOOLS)
    """Always None; list_files' entries all have the key (null when there is nothing to say)."""


@dataclass(frozen=True, kw_only=True)
class IndexedFile(_OnDisk):
    """Indexed as it is on disk; `reason` names the pages left without OCR, if any."""

    state: Literal["indexed"] = "indexed"
    chunk_count: int
    title: str | None
    ocr_engine: str
    doc_class: str
    reason: str | None = field(default=None, metadata=_NULL_IN_TOOLS)


FileState = SkippedFile | MissingFile | NewFile | FailedFile | ChangedFile | IndexedFile
"""A list_files entry: each state carries its own fields."""


@dataclass(frozen=True, kw_only=True)
class ItemState:
    """An indexed ingest_data or URL item (they belong to no root)."""

    source: str
    source_kind: str
    title: str | None
    chunk_count: int
    ingested_at: float


@dataclass(frozen=True, kw_only=True)
class FileList:
    """One page of list_files: files sorted by path, then items by id; `next_cursor` continues (None at the end)."""

    files: Annotated[list[FileState], Doc("This page's files, sorted by filePath.")]
    sources: Annotated[list[ItemState], Doc("This page's data and url sources (after every file), by id.")]
    total: Annotated[int, Doc("Files plus sources in the whole listing, every page together.")]
    total_files: int
    total_sources: int
    next_cursor: Annotated[str | None, Doc("Pass as cursor for the next page; null on the last page.")]
