"""The MCP tools' result shapes: what the output schemas promise and what clients read.

Field names are those of the service's records as wire.to_wire renders them (camelCase).
Every model tolerates extra fields, so a field the service grows later reaches
clients without a schema change breaking validation on their side.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorInfo(_Out):
    code: str = Field(description="Stable machine-readable code, e.g. invalid_argument, not_found, config_error.")
    message: str = Field(description="One sentence: what went wrong and to what.")
    hint: str | None = Field(None, description="What to do about it.")


class ErrorResult(BaseModel):
    """The shape of every failed call (sent with isError set)."""

    error: ErrorInfo


class Failure(_Out):
    path: str
    reason: str
    code: str | None = None


class RunReport(_Out):
    seen: int = Field(description="Files or items looked at.")
    added: int
    updated: int
    unchanged: int
    refreshed: int = Field(0, description="Unchanged content whose file metadata was refreshed.")
    deleted: int = 0
    skippedCount: int = 0
    failedCount: int = 0
    skipped: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    chunks: int = Field(0, description="Chunks written.")
    chunksEmbedded: int = Field(0, description="Chunks whose text went to the embedding model.")
    chunksReused: int = Field(0, description=(
        "Chunks whose text the index had embedded before (same model and scheme): the stored vector was reused."))
    seconds: float = 0.0


class SyncJob(_Out):
    jobId: str = Field(description="Poll sync_status with it until phase is succeeded or failed.")
    kind: Literal["sync", "ingest_data", "ingest_url"] = Field(
        "sync", description="sync_start's reconcile, or an ingest too large to finish within the call.")
    path: str | None = None
    source: str | None = Field(None, description="The source id an ingest job writes (null for a sync).")
    phase: Literal["queued", "scanning", "indexing", "succeeded", "failed"]
    filesDone: int
    filesTotal: int
    currentPath: str | None = None
    startedAt: float
    finishedAt: float | None = None
    elapsedSeconds: float
    failures: list[Failure] = Field([], description="Files that could not be indexed, with the reason.")
    counts: dict[str, Any] | None = Field(None, description="Final counts once the job has succeeded.")
    error: ErrorInfo | None = Field(None, description="Why the whole job failed (phase 'failed').")


class SyncRunning(_Out):
    """The sync holding the index's lock now, whichever process started it."""
    pid: int | None = None
    startedAt: float | None = None
    startedBy: str | None = Field(None, description="scheduler, mcp (sync_start) or cli (minirag sync, make sync).")
    phase: Literal["scanning", "indexing", "finishing"] | None = Field(
        None, description="Null when the running sync publishes no progress (an older version).")
    filesSeen: int | None = Field(None, description="Files found so far while scanning.")
    filesDone: int | None = Field(None, description="Files converted of filesTotal to (re-)index.")
    filesTotal: int | None = None
    chunksWritten: int | None = Field(None, description="Chunks embedded and written so far.")
    chunksEmbedded: int | None = Field(None, description="Chunks sent to the embedding model so far.")
    chunksReused: int | None = Field(None, description="Chunks that reused a vector the index held for the same text.")
    currentPath: str | None = None
    filesPerSecond: float | None = None
    etaSeconds: int | None = Field(None, description="Estimated seconds until every file is converted.")
    updatedAt: float | None = None


class SyncActivity(_Out):
    """sync_status without a jobId: what runs now on this index and how the last sync ended."""
    running: SyncRunning | None = Field(None, description="Null when no sync runs.")
    lastSync: dict[str, Any] | None = Field(None, description="The last finished sync's counts and failures.")
    jobs: list[SyncJob] = Field([], description="This server's recent background jobs, newest first.")


class SyncStatus(RootModel[SyncJob | SyncActivity]):
    """One job (with a jobId), or the index's sync activity (without)."""


class IngestOutcome(RootModel[RunReport | SyncJob]):
    """The finished run report, or (content above INGEST_FOREGROUND_MAX_BYTES) the job embedding it."""


class Hit(_Out):
    filePath: str | None = Field(None, description="Absolute path for files; null for data/url sources.")
    source: str
    sourceKind: str
    displayPath: str = Field(description="Path relative to its root (or the source id): use it in citations.")
    title: str | None = None
    chunkIndex: int
    text: str = Field(description="The matched passage only; the full section is parents[parentId].")
    parentId: str | None = None
    heading: str | None = None
    startLine: int | None = Field(None, description="First line in the source file (text files only).")
    endLine: int | None = None
    pageStart: int | None = Field(None, description="First PDF page (1-based) of the passage; cite it.")
    pageEnd: int | None = Field(None, description="Last PDF page of the passage.")
    slide: int | None = Field(None, description="Slide number of a presentation's passage.")
    sheet: str | None = Field(None, description="Sheet name of a workbook's passage.")
    alsoIn: list[dict[str, Any]] | None = Field(None, description=(
        "Other places holding the same passage (source, displayPath, chunkIndex and its location); "
        "collapsed into this hit so the results are distinct passages."))


class SourceRef(_Out):
    source: str
    displayPath: str
    title: str | None = None
    sourceKind: str


class SearchResults(_Out):
    query: str
    results: list[Hit]
    parents: dict[str, str] = Field(description="parentId -> the text of the section the hit sits in.")
    sources: list[SourceRef] = []
    trimmed: dict[str, Any] | None = Field(None, description=(
        "Set when the reply was cut to its text budget: how many parent sections and hits were left out."))


class SearchMarkdown(_Out):
    """query_documents with format "markdown": the same hits as one ready-to-paste block."""
    query: str
    resultCount: int
    markdown: str = Field(description="Numbered hits with their citations and surrounding lines.")


class SearchAnswer(RootModel[SearchResults | SearchMarkdown]):
    """The JSON answer, or (format "markdown") one Markdown block."""


class Neighbors(_Out):
    source: str
    chunkIndex: int
    chunks: list[Hit]
    omittedBefore: int = Field(0, description="Requested chunks before the hit left out to stay within maxChars.")
    omittedAfter: int = Field(0, description="Requested chunks after the hit left out to stay within maxChars.")


class Document(_Out):
    source: str
    sourceKind: str
    displayPath: str
    title: str | None = None
    chunkCount: int
    content: str = Field(description="The document as Markdown, rebuilt from its chunks: this page of it.")
    offset: int = 0
    totalChars: int | None = None
    nextOffset: int | None = Field(None, description=(
        "Where the next page starts: call read_file again with offset=nextOffset and the same revision; "
        "null when this page reaches the end."))
    remainingChars: int | None = None
    revision: str | None = Field(None, description="Names the text the offsets count in; pass it back with offset.")
    startLine: int | None = Field(None, description="With a line range: the first line returned.")
    endLine: int | None = Field(None, description="With a line range: the last line returned (clipped to the end).")
    totalLines: int | None = Field(None, description="With a line range: the document's last line.")
    pageUnit: Literal["page", "slide"] | None = Field(None, description="With a page range: pages or slides.")
    pageStart: int | None = Field(None, description=(
        "With a page range: the first page the returned text comes from (whole passages, so it may "
        "start on the page before the one asked for)."))
    pageEnd: int | None = Field(None, description="With a page range: the last page the returned text comes from.")
    totalPages: int | None = Field(None, description="With a page range: the last page (or slide) with text.")


class FileEntry(_Out):
    filePath: str
    state: str = Field(description="new, indexed, changed, failed, missing, or a skip code such as ignored.")
    reason: str | None = None


class SourceEntry(_Out):
    source: str
    sourceKind: str
    title: str | None = None
    chunkCount: int = 0


class FileList(_Out):
    files: list[FileEntry] = Field(description="This page's files, sorted by filePath.")
    sources: list[SourceEntry] = Field(description="This page's data and url sources (after every file), by id.")
    total: int = Field(0, description="Files plus sources in the whole listing, every page together.")
    totalFiles: int = 0
    totalSources: int = 0
    nextCursor: str | None = Field(None, description="Pass as cursor for the next page; null on the last page.")


class Deleted(_Out):
    source: str
    deleted: bool
    chunksRemoved: int


class Status(_Out):
    version: str
    configError: ErrorInfo | None = Field(None, description="Set when the configuration is invalid; "
                                                                "every other tool refuses until it is fixed.")
    syncRunning: SyncRunning | None = Field(None, description="The sync running now (any process), with progress.")
    lastSync: dict[str, Any] | None = Field(None, description="The last finished sync's report.")


class GrepMatch(_Out):
    filePath: str | None = Field(None, description="Absolute path for files; null for data/url sources.")
    source: str = Field(description="The file path or the data/url source id: pass it to read_file.")
    sourceKind: str
    displayPath: str = Field(description="Path relative to its root (or the source id): use it in citations.")
    title: str | None = None
    lineNumber: int | None = Field(None, description=(
        "Line in the source (text, Markdown, JSON files; text/Markdown items); null for converted formats."))
    pageStart: int | None = Field(None, description="First page of the passage the match is in (PDF, scans).")
    pageEnd: int | None = Field(None, description="Last page of that passage; equal to pageStart on one page.")
    slide: int | None = Field(None, description="Slide number (presentations).")
    sheet: str | None = Field(None, description="Sheet name (workbooks).")
    heading: str | None = Field(None, description="The section the match is in (heading path, slide, sheet).")
    chunkIndex: int = Field(description="The chunk the match is in: read_chunk_neighbors reads around it.")
    line: str = Field(description="The matching line of the indexed text (at most 400 characters around the match).")


class GrepResults(_Out):
    pattern: str
    regex: bool
    matches: list[GrepMatch]
    matchCount: int
    documentsSearched: int = Field(description="Indexed documents searched (files, data and url items).")
    filesSearched: int = Field(description="Of them, files.")
    documentsIndexed: int = Field(description=(
        "Indexed documents the filters select: all of them were searched unless truncated or stopped."))
    unindexedFiles: int = Field(
        0, description="Files under the roots (within the filters) not indexed yet: not searched.")
    failedFiles: int = Field(0, description="Files that failed to index (no text): not searched.")
    staleFiles: int = Field(0, description="Files changed on disk since indexing: searched as last indexed.")
    note: str | None = Field(None, description="What was not searched and what to do about it, in a sentence.")
    truncated: bool = Field(description="True when maxResults was reached before every document was searched.")
    stopped: Literal["deadline", "regex_timeout"] | None = Field(
        None, description="Why the scan was cut short, if it was; the matches so far are still returned.")
    skipped: list[dict[str, str]] = []
    seconds: float


class RootEntry(_Out):
    name: str = Field(description="Short name (the folder's name); grep's root accepts it or the path.")
    path: str = Field(description="Absolute path of the root.")
    exists: bool
    indexedFiles: int | None = Field(None, description="Files of this root in the index (null: index unreadable).")
    failedFiles: int | None = Field(None, description="Files of this root that failed to index.")


class RootList(_Out):
    roots: list[RootEntry]
    dataSources: int | None = Field(None, description="ingest_data items (they belong to no root).")
    urlSources: int | None = Field(None, description="ingest_url pages (they belong to no root).")
    unconfiguredRoots: dict[str, int] | None = Field(None, description=(
        "Roots the index holds files of that this server was not given, with their file counts."))
    indexError: ErrorInfo | None = Field(None, description="Set when the index could not be read for the counts.")
