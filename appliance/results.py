"""What the service returns: typed records that are their own wire shape (camelCase JSON).

The CLI prints a record's `wire()`, the MCP server returns `wire(tools=True)` and gives the
records' JSON schemas as its tools' output schemas (with each field's description), and the
status page reads `wire()`: one model per result, no second conversion (appliance.record).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field

from appliance.errors import ApplianceError, storable
from appliance.record import Json, OptionalText, Record, Text, WordedJson, is_none


@dataclass(frozen=True)
class FileProblem:
    """A file a run skipped (a skip code such as ignored, broken_link) or failed to index (an error code)."""

    path: str
    code: str
    reason: str

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> FileProblem:
        return cls(data["path"], data["code"], data["reason"])


class ErrorInfo(Record):
    # An error as every adapter writes it. No docstring: the output schemas promise `error` undescribed.
    model_config = ConfigDict(extra="allow")
    code: str = Field(description="Stable machine-readable code, e.g. invalid_argument, not_found, config_error.")
    message: str = Field(description="One sentence: what went wrong and to what.")
    hint: OptionalText = Field(default=None, description="What to do about it.")
    """The error's hint as given: a Hint keeps its next actions for the reader's wording (`wire`'s `say`)."""

    @classmethod
    def of(cls, exc: ApplianceError) -> ErrorInfo:
        return cls(code=exc.code, message=exc.message, hint=exc.hint)


class SyncRunning(Record):
    """The sync holding the index's lock now, whichever process started it (its progress file, as written:
    keys unknown to this version pass on)."""

    model_config = ConfigDict(extra="allow")
    as_written: ClassVar[bool] = True
    pid: int | None = None
    started_at: float | None = None
    started_by: str | None = Field(
        default=None, description="scheduler, mcp (sync_start) or cli (minirag sync, make sync).")
    phase: Literal["scanning", "indexing", "finishing"] | None = Field(
        None, description="Null when the running sync publishes no progress (an older version).")
    files_seen: int | None = Field(default=None, description="Files found so far while scanning.")
    files_done: int | None = Field(
        default=None, description="Files of filesTotal whose chunks (or failure) are written.")
    files_total: int | None = Field(default=None, description="Files this sync (re-)indexes.")
    files_converted: int | None = Field(default=None, description="Files converted and cut into chunks so far.")
    chunks_written: int | None = Field(default=None, description="Chunks embedded and written so far.")
    chunks_total: int | None = Field(default=None, description=(
        "Chunks the sync will write: exact once chunksTotalKnown, else estimated from the files converted."))
    chunks_total_known: bool | None = Field(default=None, description="Every file is converted: chunksTotal is exact.")
    chunks_per_second: float | None = Field(default=None, description="Chunks written per second since indexing began.")
    chunks_embedded: int | None = Field(default=None, description="Chunks sent to the embedding model so far.")
    chunks_reused: int | None = Field(default=None, description=(
        "Chunks that reused a vector the index held for the same text."))
    current_path: str | None = None
    files_per_second: float | None = None
    eta_seconds: int | None = Field(default=None, description=(
        "Estimated seconds until every chunk is written (chunks left / chunksPerSecond); null until known."))
    updated_at: float | None = None


class HeldRoot(Record):
    """A root whose indexed files a sync kept instead of deleting: it is missing, unreadable, empty or
    lost most of its files at once (sync.plan.held_roots); `--allow-deletions` accepts the loss."""

    root: str
    indexed_files: Annotated[int, Field(description="Files the index holds under the root (all kept).")]
    found_files: Annotated[int, Field(description="Files the sync found under the root now.")]
    reason: Annotated[Text, Field(description="What is wrong with the root and how to accept the deletion.")]



class RunReport(Record):
    """What an ingest or sync did; counts add up to what it saw."""

    seen: Annotated[int, Field(description="Files or items looked at.")]
    added: int
    updated: int
    unchanged: int
    refreshed: Annotated[int, Field(description="Unchanged content whose file metadata was refreshed.")] = 0
    deleted: int = 0
    skipped_count: int = 0
    failed_count: int = 0
    skipped: list[FileProblem] = Field(default_factory=list)
    failed: list[FileProblem] = Field(default_factory=list)
    rules_set_aside: Annotated[list[FileProblem], Field(description=
        "Roots indexed although an enclosing repository's rules ignore them: the rules file set aside.")] \
        = Field(default_factory=list)
    chunks: Annotated[int, Field(description="Chunks written.")] = 0
    chunks_embedded: Annotated[int, Field(description="Chunks whose text went to the embedding model.")] = 0
    chunks_reused: Annotated[int, Field(description=
        "Chunks whose text the index had embedded before (same model and scheme): the stored vector was reused.")] = 0
    seconds: float = 0.0
    started_at: float = field(default_factory=time.time)
    held_roots: Annotated[list[HeldRoot], Field(description=
        "Roots whose indexed files were kept, not deleted: missing, unreadable, empty or most files gone at "
        "once. Run the sync again with allowDeletions (CLI: --allow-deletions) to accept the deletion.")] \
        = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.held_roots

    @classmethod
    def from_dict(cls, data: Json) -> RunReport:
        """The report `to_dict` gave (one another process sent, the last-sync record)."""
        return cls.model_validate(data)

    def to_dict(self) -> Json:
        """The stored form (the last-sync record, the sync stamp, a job's counts): the CLI's wire shape, a text
        naming next actions keeping its template and actions beside it (errors.storable; `from_dict` reads it)."""
        return storable(self.model_dump(by_alias=True))


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


class SyncJob(Record):
    """A background job (a sync, or an ingest too large for one call) as it is now."""

    job_id: Annotated[str, Field(description="Poll sync_status with it until phase is succeeded or failed.")]
    kind: Annotated[Literal["sync", "ingest_data", "ingest_url"], Field(description=
        "sync_start's reconcile, or an ingest too large to finish within the call.")] = "sync"
    path: str | None = None
    source: Annotated[str | None, Field(description="The source id an ingest job writes (null for a sync).")] = None
    phase: JobPhase
    files_done: int
    files_total: int
    current_path: str | None = None
    progress: Annotated[SyncRunning | None, Field(description=
        "While the job's sync runs: its chunks written of chunksTotal, rate and etaSeconds (as status shows).")] \
        = None
    started_at: float
    finished_at: float | None = None
    elapsed_seconds: float
    failures: Annotated[list[FileProblem], Field(description="Files that could not be indexed, with the reason.")] \
        = Field(default_factory=list)
    counts: Annotated[Json | None, Field(description="Final counts once the job has succeeded.")] = None
    """RunReport.to_dict without the skipped and failed files."""
    error: Annotated[ErrorInfo | None, Field(description="Why the whole job failed (phase 'failed').")] = None
    """ApplianceError.to_dict: code, message, hint."""
    held_roots: Annotated[list[HeldRoot], Field(description=
        "Roots whose files the sync kept instead of deleting (missing, empty, or most files gone at once); "
        "sync_start with allowDeletions accepts the deletion.")] = Field(default_factory=list)


class Deleted(Record):
    """What `delete` removed."""

    source: str
    deleted: bool = True
    chunks_removed: int


class RootCounts(Record):
    """One configured root: its name, path and indexed/failed files (None when the index is unreadable)."""

    name: Annotated[str, Field(description="Short name (the folder's name); grep's root accepts it or the path.")]
    path: Annotated[str, Field(description="Absolute path of the root.")]
    exists: bool
    indexed_files: Annotated[int | None, Field(description=(
        "Files of this root in the index (null: index unreadable)."))] = None
    failed_files: Annotated[int | None, Field(description="Files of this root that failed to index.")] = None


class RootList(Record):
    """The configured roots with their counts, and the ingest_data and URL items (which belong to no root)."""

    cli_leaves_out: ClassVar[frozenset[str]] = frozenset({"index_error", "unconfigured_roots"})

    roots: list[RootCounts]
    data_sources: Annotated[int | None, Field(description="ingest_data items (they belong to no root).")] = None
    url_sources: Annotated[int | None, Field(description="ingest_url pages (they belong to no root).")] = None
    index_error: Annotated[ErrorInfo | None, Field(description=(
        "Set when the index could not be read for the counts."))] \
        = None
    unconfigured_roots: Annotated[dict[str, int] | None, Field(description=
        "Roots the index holds files of that this server was not given, with their file counts.")] \
        = None
    """Roots of indexed files that are not configured, with their file counts (None: there are none)."""


class Neighbors(Record):
    """The chunks around one hit, in document order, and how many asked for were left out."""

    source: str
    chunk_index: int
    chunks: list[Hit]
    omitted_before: Annotated[int, Field(description=(
        "Requested chunks before the hit left out to stay within maxChars."))]
    omitted_after: Annotated[int, Field(description="Requested chunks after the hit left out to stay within maxChars.")]


class SyncActivity(Record):
    """The sync running on this index now (whoever started it), the last finished one, and this process's jobs."""

    running: Annotated[SyncRunning | None, Field(description="Null when no sync runs.")]
    last_sync: Annotated[WordedJson, Field(description="The last finished sync's counts and failures.")]
    jobs: Annotated[list[SyncJob], Field(description="This server's recent background jobs, newest first.")]


class ModelInfo(Record):
    id: str
    dim: int
    max_seq_length: int
    baked: bool
    """Whether the model's files are in the models directory."""


class IndexHealth(Record):
    """What the index holds and what is wrong with it; the warnings say what to run."""

    db_path: str
    source_count: int
    failed_count: int
    unconfigured_roots: dict[str, int] | None = Field(default=None, exclude_if=is_none)
    roots_warning: OptionalText = Field(default=None, exclude_if=is_none)
    chunk_count: int
    unindexed_rows: int
    has_keyword_index: bool
    has_vector_index: bool
    query_path: str
    """"memory" (the exact in-memory replica) or "index" (LanceDB's indexes), by the memory it takes."""
    stale_chunk_count: int
    scheme_warning: OptionalText = Field(default=None, exclude_if=is_none)
    identity: Json | None
    """store.Identity's fields as stored (snake_case on the wire too)."""
    consistency_warning: OptionalText = Field(default=None, exclude_if=is_none)
    identity_warning: OptionalText = Field(default=None, exclude_if=is_none)
    identity_mismatch: str | None = Field(default=None, exclude_if=is_none)
    identity_hint: OptionalText = Field(default=None, exclude_if=is_none)


class FirstSync(Record):
    """Why the index is still empty (or was never synced whole) and when a sync will fill it."""

    starts_at: Annotated[float | None, Field(description=
        "When the first sync starts (epoch seconds; the latest moment when only a bound is known); "
        "null when nothing has scheduled one.")] = None
    starts_in_seconds: Annotated[float | None, Field(description=(
        "Seconds from now until starts_at (0: due now)."))] = None
    message: Annotated[Text, Field(description="What is pending, who will run it, or how to start it.")]


class SettingsView(Record):
    """The settings in effect, as status shows them (config.Settings.describe)."""

    base_dirs: list[str]
    db_path: str
    """The index's directory, or its bucket's s3:// URI."""
    state_dir: str | None = Field(default=None, exclude_if=is_none)
    """For an index in a bucket: this host's state directory (lock, progress, scheduler record)."""
    storage_endpoint: str | None = Field(default=None, exclude_if=is_none)
    """For an index in a bucket: the S3-compatible endpoint, when not AWS's (never a credential)."""
    models_dir: str
    model_name: str
    max_file_size: int
    ingest_foreground_max_bytes: int
    chunk_token_budget: int | None
    hybrid_weight: float
    grouping: str | None
    max_distance: float | None
    max_files: int | None
    ocr_languages: str
    ocr_min_chars_per_page: int
    convert_timeout_seconds: float
    convert_memory_mb: int
    allow_url_ingest: bool
    allow_private_urls: bool
    snapshot_dedupe: bool
    sync_interval_seconds: int
    sync_delete_limit: int
    change_detection: str


CONFIG_ERROR = "Set when the configuration is invalid; every other tool refuses until it is fixed."


class Status(Record):
    """Configuration and index health; `index_error` instead of `index` when the index cannot be read."""

    cli_leaves_out: ClassVar[frozenset[str]] = frozenset({"first_sync", "config_error"})

    version: str
    config: SettingsView
    ocr: str
    ocr_hint: str | None = Field(default=None, exclude_if=is_none)
    model: ModelInfo
    chunk_token_budget: int | None = Field(default=None, exclude_if=is_none)
    index: IndexHealth | None = Field(default=None, exclude_if=is_none)
    index_error: ErrorInfo | None = Field(default=None, exclude_if=is_none)
    sync_running: Annotated[SyncRunning | None, Field(description="The sync running now (any process), with progress.")]
    scheduler: WordedJson
    last_sync: Annotated[WordedJson, Field(description="The last finished sync's report.")]
    ignore_problems: list[dict[str, str]]
    first_sync: Annotated[FirstSync | None, Field(description=
        "Set while the index is empty or was never synced whole and no sync runs: when the first sync "
        "starts, or how to start one.")] = None
    dictionaries: Annotated[WordedJson, Field(description=
        "The cross-language dictionaries: loaded (with their language pairs), or unavailable with the error and "
        "how to bake them (search then runs without translation and compound splitting).")] \
        = Field(default=None, exclude_if=is_none)
    config_error: Annotated[ErrorInfo | None, Field(description=CONFIG_ERROR)] = None
    """Always None here (the tools' status carries the key); StatusUnavailable sets it."""


class StatusUnavailable(Record):
    """status when the configuration cannot be used: the version, what is wrong, and the settings read."""

    cli_leaves_out: ClassVar[frozenset[str]] = frozenset({"sync_running", "last_sync"})

    version: str
    config_error: Annotated[ErrorInfo, Field(description=CONFIG_ERROR)]
    sync_running: SyncRunning | None = None
    last_sync: WordedJson = None
    config: SettingsView | None = Field(default=None, exclude_if=is_none)


class Document(Record):
    """A document rebuilt from its chunks: one page of it (`next_offset` continues, None at the end),
    or of the lines or pages asked for (the fields of that range are set, the others None)."""

    cli_leaves_out: ClassVar[frozenset[str]] = frozenset(
        {"start_line", "end_line", "total_lines", "page_unit", "page_start", "page_end", "total_pages"})

    source: str
    source_kind: str
    display_path: str
    title: str | None
    chunk_count: int
    content: Annotated[str, Field(description="The document as Markdown, rebuilt from its chunks: this page of it.")]
    offset: int
    total_chars: int
    next_offset: Annotated[int | None, Field(description=
        "Where the next page starts: call read_file again with offset=nextOffset and the same revision; "
        "null when this page reaches the end.")]
    remaining_chars: int
    revision: Annotated[str, Field(description="Names the text the offsets count in; pass it back with offset.")]
    """Names the whole document's text; a page asked with another revision is refused."""
    start_line: Annotated[int | None, Field(description="With a line range: the first line returned.")] \
        = None
    end_line: Annotated[int | None, Field(description=(
        "With a line range: the last line returned (clipped to the end)."))] \
        = None
    total_lines: Annotated[int | None, Field(description="With a line range: the document's last line.")] \
        = None
    page_unit: Annotated[Literal["page", "slide"] | None, Field(description="With a page range: pages or slides.")] \
        = None
    page_start: Annotated[int | None, Field(description=
        "With a page range: the first page the returned text comes from (whole passages, so it may "
        "start on the page before the one asked for).")] = None
    page_end: Annotated[int | None, Field(description=(
        "With a page range: the last page the returned text comes from."))] \
        = None
    total_pages: Annotated[int | None, Field(description="With a page range: the last page (or slide) with text.")] \
        = None


class Place(Record):
    """Another place holding a hit's passage (query.distinct collapsed it into the hit)."""

    source: str
    display_path: str
    chunk_index: int
    start_line: int | None = Field(default=None, exclude_if=is_none)
    end_line: int | None = Field(default=None, exclude_if=is_none)
    page_start: int | None = Field(default=None, exclude_if=is_none)
    page_end: int | None = Field(default=None, exclude_if=is_none)
    slide: int | None = Field(default=None, exclude_if=is_none)
    sheet: str | None = Field(default=None, exclude_if=is_none)


class Passage(Record):
    """A stored chunk as a hit shows it: its document, its place in it and its text."""

    file_path: Annotated[str | None, Field(description="Absolute path for files; null for data/url sources.")] = None
    source: str
    source_kind: str
    display_path: Annotated[str, Field(description=(
        "Path relative to its root (or the source id): use it in citations."))]
    title: str | None = None
    chunk_index: int
    text: Annotated[str, Field(description="The matched passage only; the full section is parents[parentId].")]
    parent_id: str | None = None
    heading: str | None = None
    start_line: Annotated[int | None, Field(description="First line in the source file (text files only).")] = None
    end_line: int | None = None
    page_start: Annotated[int | None, Field(description="First PDF page (1-based) of the passage; cite it.")] = None
    page_end: Annotated[int | None, Field(description="Last PDF page of the passage.")] = None
    slide: Annotated[int | None, Field(description="Slide number of a presentation's passage.")] = None
    sheet: Annotated[str | None, Field(description="Sheet name of a workbook's passage.")] = None
    doc_class: str | None = None
    also_in: Annotated[list[Place] | None, Field(description=
        "Other places holding the same passage (source, displayPath, chunkIndex and its location); "
        "collapsed into this hit so the results are distinct passages; the best-ranked few, alsoInMore "
        "counts the rest.")] = None
    """query.distinct's places of the copies, for a search hit; always None around a hit."""
    also_in_more: Annotated[int | None, Field(description=
        "Copies of this passage found beyond those alsoIn lists.")] = Field(default=None, exclude_if=is_none)


class Explanation(Record):
    """Why a hit came back (explain): its rank on each side and the query terms it holds."""

    vector_rank: int | None
    keyword_rank: int | None
    matched: list[dict[str, str | None]]


class _Ranking(Record):
    score: float | None = None
    distance: float | None = None
    """None when only the keyword side found the passage."""
    explain: Annotated[Explanation | None, Field(description=
        "With explain: vectorRank and keywordRank (1-based among that side's candidates; null where the side "
        "did not find the passage) and `matched`, the query terms the passage holds, each with its kind: the "
        "query's own word, a translation (with its dictionary and language pair) or a compound part.")] \
        = Field(default=None, exclude_if=is_none)


class _Snapshot(Record):
    snapshot_date: str | None = Field(default=None, exclude_if=is_none)
    also_unchanged_on: list[str] | None = Field(default=None, exclude_if=is_none)
    """The dates of the later snapshots this dated passage is unchanged in (set with snapshot_date)."""


# Bases are listed so the fields come in wire order: a Passage's, the ranking's, the snapshot's.
class Hit(_Snapshot, Passage):
    """A chunk read around a hit (read_chunk_neighbors): a passage without a ranking."""


class RankedHit(_Snapshot, _Ranking, Passage):
    """A search hit: the passage with its fused score and vector distance."""


class SourceRef(Record):
    """A document some hit comes from, once per document."""

    source: str
    display_path: str
    title: str | None = None
    source_kind: str


class Trimmed(Record):
    """What a search reply cut to stay within its text budget left out."""

    budget_chars: int
    parents_omitted: int
    hits_omitted: int
    note: str


class SearchResults(Record):
    """Hits in rank order, each parent section's text once, and the documents they come from."""

    cli_leaves_out: ClassVar[frozenset[str]] = frozenset({"trimmed"})

    query: str
    results: list[RankedHit]
    parents: Annotated[dict[str, str], Field(description=
        "parentId -> the section the hit sits in: the text around the hits (sections \"excerpt\", the default: "
        "[hit chunk N] stands for the hit's own text, [...] for text left out), whole (\"full\"), or empty "
        "(\"none\").")]
    sources: list[SourceRef] = Field(default_factory=list)
    sections: Annotated[Literal["excerpt", "full", "none"], Field(description=(
        "How much of each section parents holds."))] \
        = "full"
    excerpted: Annotated[list[str] | None, Field(description=
        "parentIds whose text in parents is only the part around the hits: ask again with sections \"full\", "
        "or read on with read_chunk_neighbors / read_file.")] = None
    trimmed: Annotated[Trimmed | None, Field(description=
        "Set when the reply was cut to its text budget: how many parent sections and hits were left out.")] \
        = None
    empty_index: Annotated[FirstSync | None, Field(description=
        "Set when there are no hits because the index holds nothing yet: when a sync fills it, or how to "
        "start one (status's firstSync).")] = Field(default=None, exclude_if=is_none)


class GrepMatch(Record):
    """One matching line and where it is: the line (sources with lines), else the chunk's pages, slide or sheet."""

    source: Annotated[str, Field(description="The file path or the data/url source id: pass it to read_file.")]
    source_kind: str
    file_path: Annotated[str | None, Field(description="Absolute path for files; null for data/url sources.")] = None
    display_path: Annotated[str, Field(description=(
        "Path relative to its root (or the source id): use it in citations."))]
    title: str | None = None
    chunk_index: Annotated[int, Field(description="The chunk the match is in: read_chunk_neighbors reads around it.")]
    heading: Annotated[str | None, Field(description=(
        "The section the match is in (heading path, slide, sheet)."))] = None
    page_start: Annotated[int | None, Field(description=(
        "First page of the passage the match is in (PDF, scans)."))] = None
    page_end: Annotated[int | None, Field(description=(
        "Last page of that passage; equal to pageStart on one page."))] = None
    slide: Annotated[int | None, Field(description="Slide number (presentations).")] = None
    sheet: Annotated[str | None, Field(description="Sheet name (workbooks).")] = None
    line_number: Annotated[int | None, Field(description=
        "Line in the source (text, Markdown, JSON files; text/Markdown items); null for converted formats.")] = None
    line: Annotated[str, Field(description=(
        "The matching line of the indexed text (at most 400 characters around the match)."))]


class GrepResults(Record):
    """grep's matches in document order, what was searched, and what could not be (with a note saying so)."""

    pattern: str
    regex: bool
    matches: list[GrepMatch]
    match_count: int
    documents_searched: Annotated[int, Field(description="Indexed documents searched (files, data and url items).")]
    files_searched: Annotated[int, Field(description="Of them, files.")]
    documents_indexed: Annotated[int, Field(description=
        "Indexed documents the filters select: all of them were searched unless truncated or stopped.")]
    unindexed_files: Annotated[int, Field(description=
        "Files under the roots (within the filters) not indexed yet: not searched.")] = 0
    failed_files: Annotated[int, Field(description="Files that failed to index (no text): not searched.")] = 0
    stale_files: Annotated[int, Field(description=(
        "Files changed on disk since indexing: searched as last indexed."))] = 0
    note: Annotated[str | None, Field(description=(
        "What was not searched and what to do about it, in a sentence."))] = None
    truncated: Annotated[bool, Field(description=(
        "True when maxResults was reached before every document was searched."))]
    stopped: Annotated[Literal["deadline", "regex_timeout"] | None, Field(description=
        "Why the scan was cut short, if it was; the matches so far are still returned.")] = None
    skipped: list[dict[str, str]] = Field(default_factory=list)
    seconds: float


class SearchMarkdown(Record):
    """`search`'s answer as one Markdown block (gather)."""

    query: str
    result_count: int
    markdown: Annotated[str, Field(description="Numbered hits with their citations and surrounding lines.")]
    empty_index: Annotated[FirstSync | None, Field(description=SearchResults.model_fields["empty_index"].description)] \
        = Field(default=None, exclude_if=is_none)


MISSING_REASON = (
    "indexed, but no longer on disk; the next sync removes it (unless its root is missing, empty or lost most "
    "of its files: then only a sync with --allow-deletions does)")


class SkippedFile(Record):
    """A file the scan left out, not indexed: its skip code is its state (unsupported, unreadable,
    broken_link ...; ignored only with include_ignored) and `reason` says why."""

    file_path: str
    display_path: Annotated[str, Field(description="Path relative to its root.")]
    state: Annotated[str, Field(description=
        "new, indexed, changed, failed, missing, or a skip code: unsupported (not a type indexed), "
        "ignored (by the rules file the reason names), unreadable, broken_link, invalid_name.")]
    reason: str


class MissingFile(Record):
    """An indexed file no longer on disk."""

    file_path: str
    display_path: Annotated[str, Field(description=(
        "Path relative to its root, as it was indexed: use it in citations."))]
    state: Literal["missing"] = "missing"
    chunk_count: int
    reason: str = MISSING_REASON


class _OnDisk(Record):
    file_path: str
    display_path: str
    size: int


class NewFile(_OnDisk):
    """On disk, never indexed."""

    cli_leaves_out: ClassVar[frozenset[str]] = frozenset({"reason"})

    state: Literal["new"] = "new"
    reason: str | None = None
    """Always None; list_files' entries all have the key (null when there is nothing to say)."""


class FailedFile(_OnDisk):
    """Indexing it failed: the error code and message."""

    state: Literal["failed"] = "failed"
    reason: str
    code: str


class ChangedFile(_OnDisk):
    """Changed on disk since it was indexed."""

    cli_leaves_out: ClassVar[frozenset[str]] = frozenset({"reason"})

    state: Literal["changed"] = "changed"
    chunk_count: int
    reason: str | None = None
    """Always None; list_files' entries all have the key (null when there is nothing to say)."""


class IndexedFile(_OnDisk):
    """Indexed as it is on disk; `reason` names the pages left without OCR, if any."""

    cli_leaves_out: ClassVar[frozenset[str]] = frozenset({"reason"})

    state: Literal["indexed"] = "indexed"
    chunk_count: int
    title: str | None
    ocr_engine: str
    doc_class: str
    reason: str | None = None


FileState = SkippedFile | MissingFile | NewFile | FailedFile | ChangedFile | IndexedFile
"""A list_files entry: each state carries its own fields."""


class ItemState(Record):
    """An indexed ingest_data or URL item (they belong to no root)."""

    source: str
    source_kind: str
    title: str | None
    chunk_count: int
    ingested_at: float


class FileList(Record):
    """One page of list_files: files sorted by path, then items by id; `next_cursor` continues (None at the end)."""

    files: Annotated[list[FileState], Field(description="This page's files, sorted by filePath.")]
    sources: Annotated[list[ItemState], Field(description=(
        "This page's data and url sources (after every file), by id."))]
    total: Annotated[int, Field(description="Files plus sources in the whole listing, every page together.")]
    total_files: int
    total_sources: int
    next_cursor: Annotated[str | None, Field(description="Pass as cursor for the next page; null on the last page.")]
