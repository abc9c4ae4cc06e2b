"""The MCP adapter: declare the tools, call the Appliance, return a model or a structured error.

Startup stays cheap: declaring the tools imports none of LanceDB, fastembed or
markitdown, and `initialize` and `tools/list` never wait for the service, the index
or the model. The Appliance (LanceDB, the embedding model) is built once per process
by a background warm-up, started when the client has listed the tools (the end of
its handshake), or by the first tool call, whichever comes first, and shared by every
later call; calls run in worker threads so a slow search never blocks the protocol loop.

Every failure reaches the client as `{"error": {code, message, hint}}` with
isError set; nothing but protocol frames is written to stdout.
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Literal

import anyio
from fastmcp import Context, FastMCP
from fastmcp.dependencies import CurrentContext
from fastmcp.exceptions import NotFoundError as UnknownComponent, ValidationError as ArgumentsInvalid
from fastmcp.server.middleware import Middleware
from fastmcp.tools import ToolResult
from mcp.types import TextContent, ToolAnnotations
from pydantic import Field

from appliance import __version__
from appliance.adapters.agent_hints import say
from appliance.adapters.mcp_models import (
    DELETED,
    DOCUMENT,
    FILE_LIST,
    GREP_RESULTS,
    INGEST_OUTCOME,
    NEIGHBORS,
    ROOT_LIST,
    RUN_REPORT,
    SEARCH_ANSWER,
    STATUS,
    SYNC_JOB,
    SYNC_STATUS,
    Schema,
)
from appliance.adapters.runtime import Runtime, result_text
from appliance.assemble.paging import DEFAULT_PAGE, MAX_CURSOR_CHARS, MAX_PAGE, MAX_PAGE_CHARS, READ_PAGE_CHARS
from appliance.errors import ApplianceError, InvalidArgument, UrlIngestDisabled
from appliance.platform.stopping import Stopped
from appliance.record import Record
from appliance.results import ErrorInfo, RunReport, SyncJob, SyncRunning
from appliance.sync.state import progress_line

if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence

    import mcp_types as mt
    from fastmcp.server.middleware import CallNext, MiddlewareContext
    from fastmcp.tools import Tool

    from appliance.config import Environment, Overrides
    from appliance.service import Appliance

    ToolFunction = Callable[..., Awaitable[ToolResult]]
    Call = Callable[[Callable[[Appliance], Record]], Awaitable[ToolResult]]
    """create_server's `call`: run a service operation in a thread, its record as the tool's result."""

log = logging.getLogger("appliance.adapters.mcp_server")

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
REPLACES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
STARTS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
FETCHES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True)

FilePath = Annotated[str, Field(min_length=1, max_length=4096,
                                description="Absolute path of a file inside a document root.")]
SourceId = Annotated[str, Field(min_length=1, max_length=1024,
                                description="A data or url source id, as list_files shows it.")]
Scope = Annotated[str | None, Field(None, min_length=1, max_length=4096,
                                    description="Only under this absolute path or source-id prefix "
                                                "(matching stops at a '/').")]


def _result(data: dict[str, object], *, is_error: bool = False) -> ToolResult:
    return ToolResult(content=[TextContent(type="text", text=result_text(data))], structured_content=data,
                      is_error=is_error)


def error_result(code: str, message: str, hint: str | None = None) -> ToolResult:
    return _result({"error": {"code": code, "message": message, "hint": hint}}, is_error=True)


def internal_error() -> ToolResult:
    return error_result("internal_error", "The server hit an unexpected error; nothing about it is exposed here",
                        "The server log (stderr) has the traceback; retrying may help if the cause was transient.")


async def _render(work: Callable[[], Record]) -> ToolResult:
    """Run `work` in a worker thread; its record as the tool's result, or its error."""
    try:
        record = await anyio.to_thread.run_sync(work)
        return _result(record.wire(tools=True, say=say))
    except ApplianceError as exc:
        return _result({"error": ErrorInfo.of(exc).wire(tools=True, say=say)}, is_error=True)
    except Stopped as exc:  # the server is stopping (its client left): no traceback for that
        return error_result("stopped", f"The server is stopping ({exc})", "Call again once it runs.")
    except Exception:
        log.exception("tool call failed")
        return internal_error()


PROGRESS_EVERY_S = 1.0
"""How often a followed sync_start job sends a progress notification."""
FOLLOW_MAX_S = 45.0
"""How long sync_start follows its job with notifications before it returns the running job (with its
jobId, for sync_status): clients time a request out after 60 s by default, progress or not."""


def _progress_token(ctx: Context) -> object:
    """The request's progressToken (the client asked for progress notifications), or None."""
    rc = ctx.request_context
    return (rc.meta or {}).get("progressToken") if rc is not None else None


async def _follow(ctx: Context, job_id: str, call: Call) -> ToolResult:
    """Send the job's progress as notifications until it ends (its final record) or FOLLOW_MAX_S passes
    (the running job)."""
    deadline = anyio.current_time() + FOLLOW_MAX_S
    while True:
        job = await call(lambda app: app.sync_status(job_id))
        data = job.structured_content or {}
        if job.is_error or data.get("finishedAt") or anyio.current_time() >= deadline:
            return job
        run = data.get("progress") or {}
        await ctx.report_progress(data["filesDone"], data["filesTotal"] or None,
                                  (progress_line(SyncRunning.model_validate(run)) if run.get("phase") else
                                   f"{data['phase']} {data['filesDone']}/{data['filesTotal']} files"
                                   + (f", at {data['currentPath']}" if data.get("currentPath") else ""))
                                  + f" (jobId {job_id})")
        await anyio.sleep(PROGRESS_EVERY_S)


class ErrorsAsValues(Middleware):
    """Arguments that fail the input schema, and anything that slips past a tool, become error values."""

    async def on_call_tool(self, context: MiddlewareContext[mt.CallToolRequestParams],
                           call_next: CallNext[mt.CallToolRequestParams, ToolResult]) -> ToolResult:
        try:
            return await call_next(context)
        except ArgumentsInvalid as exc:
            return error_result("invalid_argument", _describe_invalid(exc),
                                "Check the tool's input schema (tools/list) for names, types and bounds.")
        except UnknownComponent:  # an unknown tool name stays a protocol error
            raise
        except Exception as exc:
            log.error("tool %r failed outside its handler", context.message.name, exc_info=exc)
            return internal_error()


class WarmUpAfterListing(Middleware):
    """Clients list tools right after the handshake; that is the moment to start loading the model.

    Not earlier: the warm-up holds the GIL most of the time it imports and loads, and a protocol
    loop sharing it answered `initialize` and `tools/list` later (seconds later on a busy machine),
    and the first query no sooner (scripts/bench_mcp.py, scripts/bench_image.py)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def on_list_tools(self, context: MiddlewareContext[mt.ListToolsRequest],
                            call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]]) -> Sequence[Tool]:
        result = await call_next(context)
        self.runtime.warm_up()
        return result


def _describe_invalid(exc: Exception) -> str:
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if not callable(errors):
        return "The arguments do not match the tool's input schema"
    parts = []
    for err in errors(include_input=False, include_url=False)[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return ("Invalid arguments: " + "; ".join(parts))[:600]


def create_server(runtime: Runtime) -> FastMCP:
    """A FastMCP server whose tools call the Appliance that `runtime` builds."""
    mcp = FastMCP("minirag", instructions=runtime.instructions(), version=__version__,
                  mask_error_details=True, middleware=[ErrorsAsValues(), WarmUpAfterListing(runtime)])

    def call(work: Callable[[Appliance], Record]) -> Awaitable[ToolResult]:
        return _render(lambda: work(runtime.appliance()))

    def tool(annotations: ToolAnnotations, schema: Schema) -> Callable[[ToolFunction], ToolFunction]:
        """Declare `fn` as a tool returning what `schema` describes, described by its docstring as written.

        fastmcp would parse the docstring with griffe (three parsers, and griffe's import, about
        0.2 s of a cold start); none of ours has sections to split off, so it goes in whole."""
        def declare(fn: ToolFunction) -> ToolFunction:
            description, fn.__doc__ = inspect.getdoc(fn), None
            return mcp.tool(annotations=annotations, output_schema=schema, description=description)(fn)
        return declare

    @tool(STARTS, SYNC_JOB)
    async def sync_start(path: Annotated[str | None, Field(
            None, min_length=1, max_length=4096,
            description="Reconcile only under this absolute path (default: every root).")] = None,
            allowDeletions: Annotated[bool, Field(description=(
                "Accept deleting the indexed files of a root that is missing, empty or lost most of its "
                "files at once (otherwise they are kept and the job's heldRoots names the root)."))] = False,
            ctx: Context = CurrentContext()) -> ToolResult:
        """Start reconciling the index with the files on disk in the background; returns a jobId.

        New and changed files are indexed, deleted ones removed, except that a root which looks
        unmounted (missing, empty, most files gone at once) keeps its files and is named in heldRoots
        until a sync with allowDeletions. Poll sync_status with the jobId.
        Refuses with sync_busy while another sync holds the index. A request that carries a
        progressToken gets progress notifications, and the call returns when the job ends or
        after 45 s with the job still running (keep polling sync_status then)."""
        started = await call(lambda app: app.sync_start(path, require_absolute=True,
                                                                    allow_deletions=allowDeletions))
        if started.is_error or _progress_token(ctx) is None:
            return started
        return await _follow(ctx, (started.structured_content or {})["jobId"], call)

    @tool(READ_ONLY, SYNC_STATUS)
    async def sync_status(jobId: Annotated[str | None, Field(
            None, min_length=1, max_length=64,
            description="The jobId sync_start, ingest_data or ingest_url returned; omit it for the index's "
                        "sync activity.")] = None) -> ToolResult:
        """Progress of a background job (a sync, or a large ingest_data/ingest_url): phase,
        filesDone/filesTotal (files whose chunks are written), while a sync runs its progress (chunks
        written of chunksTotal, rate, etaSeconds), per-file failures, and final counts once phase is succeeded.

        Without jobId: the sync running on this index now, whoever started it (the scheduler,
        another client, the CLI), with phase, files done/total, chunks written, rate and ETA;
        the last finished sync; and this server's recent jobs."""
        return await call(lambda app: app.sync_status(jobId))

    @tool(STARTS, SYNC_JOB)
    async def sync_cancel(jobId: Annotated[str, Field(
            min_length=1, max_length=64,
            description="The jobId sync_start, ingest_data or ingest_url returned.")]) -> ToolResult:
        """Cancel a background job of this server (a sync, or a large ingest_data/ingest_url).

        Returns the job; it stops within seconds (a conversion is killed, embedding is abandoned,
        a write in flight finishes) and sync_status then shows phase cancelled. What a cancelled
        sync did not index, the next sync does; a cancelled ingest wrote nothing."""
        return await call(lambda app: app.cancel_job(jobId))

    @tool(WRITES, RUN_REPORT)
    async def ingest_file(filePath: FilePath) -> ToolResult:
        """Index (or re-index) one file, replacing whatever was indexed for it before."""
        return await call(lambda app: app.ingest([filePath], require_absolute=True))

    @tool(REPLACES, INGEST_OUTCOME)
    async def ingest_data(
            content: Annotated[str, Field(min_length=1, description="The document text.")],
            source: Annotated[str, Field(min_length=1, max_length=1024, description=(
                "An id of your choosing, e.g. 'meeting-2024-05'; must not start with '/'. "
                "Ingesting the same id again replaces its content."))],
            format: Annotated[Literal["text", "markdown", "html"],
                              Field(description="How to read content.")] = "markdown",
            title: Annotated[str | None, Field(None, max_length=500)] = None) -> ToolResult:
        """Index text, Markdown or HTML you already hold, under a source id you choose.

        Small content is indexed before the call returns its counts. Content above the server's
        ingestForegroundMaxBytes (see status) is indexed in the background: the call returns a job
        with a jobId at once; poll sync_status with that jobId until phase is succeeded."""
        return await call(lambda app: app.ingest_data_bounded(source, content, format, title=title))

    @tool(FETCHES, INGEST_OUTCOME)
    async def ingest_url(url: Annotated[str, Field(min_length=8, max_length=2048, pattern=r"^https?://",
                                                   description="An http(s) URL to fetch and index.")]) -> ToolResult:
        """Fetch a web page, convert it to Markdown and index it (only when the operator enabled URL ingest).

        A page whose text is above ingestForegroundMaxBytes is indexed in the background: the call
        returns a job with a jobId; poll sync_status with that jobId until phase is succeeded."""
        return await call(lambda app: _ingest_url(app, url))

    @tool(READ_ONLY, SEARCH_ANSWER)
    async def query_documents(
            query: Annotated[str, Field(min_length=1, max_length=4000,
                                        description="Words, a question or an identifier.")],
            topK: Annotated[int, Field(ge=1, le=100, description="How many passages to return.")] = 10,
            scope: Scope = None,
            docClass: Annotated[str | None, Field(
                None, min_length=1, max_length=100,
                description="Only sources of this class (front-matter type).")] = None,
            format: Annotated[Literal["json", "markdown"], Field(description=(
                "json: hits with their sections; markdown: one ready-to-paste block of numbered hits "
                "with citations"))] = "json",
            contextLines: Annotated[int, Field(ge=0, le=20, description=(
                "With format markdown: lines of a text file shown around each passage."))] = 3,
            sections: Annotated[Literal["excerpt", "full", "none"], Field(description=(
                "How much of each hit's section parents holds: excerpt (the part around the hits), full "
                "(whole sections, a much longer reply) or none."))] = "excerpt",
            explain: Annotated[bool, Field(description=(
                "With format json: add to each hit its rank on the vector and the keyword side and the "
                "query terms it matched (own words, translations, compound parts)."))] = False,
    ) -> ToolResult:
        """Hybrid search (meaning plus exact keywords) over the indexed documents.

        Each hit's text is the matched passage; parents[hit.parentId] is the text of its section around
        it ("[hit chunk N]" stands for the hit's own text, [...] for text left out; sections "full" or
        read_chunk_neighbors gives the rest).
        Cite each hit as displayPath (or title) with where it says: :startLine-endLine, p. pageStart(-pageEnd),
        slide N or sheet NAME. format "markdown" returns the same hits as one numbered block instead."""
        if format == "markdown":
            answer = await call(lambda app: app.gather(
                query, top_k=topK, scope=scope, doc_class=docClass, context_lines=contextLines))
            if not answer.is_error:  # the block itself as the text a client shows, and why it is empty if it is
                block = answer.structured_content or {}
                why = (block.get("emptyIndex") or {}).get("message")
                answer.content = [TextContent(type="text", text=block["markdown"] + (f"\n{why}\n" if why else ""))]
            return answer
        return await call(lambda app: app.search(query, top_k=topK, scope=scope, doc_class=docClass,
                                                                   sections=sections, explain=explain))

    @tool(READ_ONLY, NEIGHBORS)
    async def read_chunk_neighbors(
            chunkIndex: Annotated[int, Field(ge=0, le=10**9, description="chunkIndex of a search hit.")],
            filePath: FilePath | None = None, source: SourceId | None = None,
            before: Annotated[int, Field(ge=0, le=50)] = 2, after: Annotated[int, Field(ge=0, le=50)] = 2,
            maxChars: Annotated[int, Field(ge=1000, le=MAX_PAGE_CHARS, description=(
                "Most characters of chunk text to return."))] = READ_PAGE_CHARS,
    ) -> ToolResult:
        """The chunks just before and after one chunk of a document, in order. Give filePath or source.

        At most maxChars of text: the hit's chunk always, then the nearest ones. omittedBefore /
        omittedAfter count the requested chunks left out; ask again centred on the first or last
        chunk returned to read on (or use read_file for a whole document)."""
        return await call(lambda app: app.read_neighbors(
            *_one_target(filePath, source), chunkIndex, before=before, after=after, require_absolute=True,
            max_chars=maxChars))

    @tool(READ_ONLY, DOCUMENT)
    async def read_file(filePath: FilePath | None = None, source: SourceId | None = None,
                        offset: Annotated[int, Field(
                            ge=0, description="Character offset to start at (from nextOffset).")] = 0,
                        maxChars: Annotated[int, Field(ge=1000, le=MAX_PAGE_CHARS, description=(
                            "Longest page to return, in characters (about 4 per token)."))] = READ_PAGE_CHARS,
                        revision: Annotated[str | None, Field(None, max_length=64, description=(
                            "The revision a previous page returned; refused if the document changed."))] = None,
                        startLine: Annotated[int | None, Field(None, ge=1, description=(
                            "First line to read (1-based), for sources with lines: a grep match's lineNumber "
                            "minus a few."))] = None,
                        endLine: Annotated[int | None, Field(None, ge=1, description=(
                            "Last line to read (inclusive); omit for the end."))] = None,
                        pageStart: Annotated[int | None, Field(None, ge=1, description=(
                            "First page (PDF, scan) or slide (presentation) to read (1-based)."))] = None,
                        pageEnd: Annotated[int | None, Field(None, ge=1, description=(
                            "Last page or slide to read (inclusive); omit for the end."))] = None,
                        ) -> ToolResult:
        """An indexed document as Markdown, rebuilt from its chunks, one page at a time. Give filePath or source.

        A long document comes in pages of at most maxChars; when nextOffset is not null, call again with
        offset=nextOffset and revision to continue. To read around a hit instead of the whole document, give
        startLine/endLine (files with lines: text, Markdown, JSON) or pageStart/pageEnd (PDF pages, slides);
        offsets then count within that part."""
        return await call(lambda app: app.read(
            *_one_target(filePath, source), require_absolute=True, offset=offset, max_chars=maxChars,
            revision=revision, start_line=startLine, end_line=endLine, page_start=pageStart, page_end=pageEnd))

    @tool(READ_ONLY, FILE_LIST)
    async def list_files(
            scope: Scope = None,
            limit: Annotated[int, Field(
                ge=1, le=MAX_PAGE, description="Entries (files and sources) per page.")] = DEFAULT_PAGE,
            cursor: Annotated[str | None, Field(None, min_length=1, max_length=MAX_CURSOR_CHARS, description=(
                "nextCursor from the previous page, unchanged (same scope); omit for the first page."))] = None,
    ) -> ToolResult:
        """Every file under the document roots with its state (sorted by path), then the indexed data
        and url sources, one page at a time: while nextCursor is not null, call again with it."""
        return await call(lambda app: app.list_files(scope=scope, require_absolute=True,
                                                                  limit=limit, cursor=cursor))

    @tool(REPLACES, DELETED)
    async def delete_file(filePath: FilePath | None = None, source: SourceId | None = None) -> ToolResult:
        """Remove a file, data item or url item from the index; the file on disk is never touched."""
        return await call(lambda app: app.delete(*_one_target(filePath, source), require_absolute=True))

    @tool(READ_ONLY, GREP_RESULTS)
    async def grep(
            pattern: Annotated[str, Field(min_length=1, max_length=1000, description="Text (or a regex) to find.")],
            regex: Annotated[bool, Field(description="Treat pattern as a Python regular expression.")] = False,
            caseSensitive: bool = False, scope: Scope = None,
            root: Annotated[str | None, Field(None, min_length=1, max_length=4096, description=(
                "Only files of this root: its name or path as list_roots gives them."))] = None,
            fileGlob: Annotated[str | None, Field(None, min_length=1, max_length=1000, description=(
                "Only documents whose displayPath matches, .gitignore-style: '*.pdf' at any depth, "
                "'reports/**/*.md' from the root."))] = None,
            maxResults: Annotated[int, Field(ge=1, le=500)] = 100) -> ToolResult:
        """Exact-match search, line by line, over the indexed text of every document: text files, PDFs,
        Office files, EPUBs, OCRed scans, ingest_data items and fetched pages.

        Each match has the line and where it is: lineNumber (text files), pageStart-pageEnd (PDF),
        slide or sheet; open it with read_file (startLine/endLine or pageStart/pageEnd around it).
        Use it for identifiers, error codes and exact phrases; bounded in count and time. Files not
        indexed yet are not searched: unindexedFiles and note say so."""
        return await call(lambda app: app.grep(pattern, regex=regex, case_sensitive=caseSensitive,
                                                                scope=scope, root=root, file_glob=fileGlob,
                                                                max_results=maxResults, require_absolute=True))

    @mcp.tool(annotations=READ_ONLY, output_schema=ROOT_LIST)
    async def list_roots() -> ToolResult:
        """The document roots this server searches, by name and absolute path, with how many files of
        each are indexed (and failed), plus the count of ingest_data and url items. A cheap first call
        to learn what corpus exists; grep's root takes a name or path from here."""
        return await call(lambda app: app.list_roots())

    @tool(READ_ONLY, STATUS)
    async def status() -> ToolResult:
        """Configuration and index health: roots, model, counts, stale chunks, a running sync.

        Answers even when the configuration is broken (then with configError)."""
        return await _render(runtime.status)

    return mcp


def _one_target(file_path: str | None, source: str | None) -> tuple[str, bool]:
    """(target, is_source): a file path, or a data/url source id taken as given."""
    if file_path is not None and source is None:
        return file_path, False
    if source is not None and file_path is None:
        return source, True
    raise InvalidArgument("Give exactly one of filePath or source")


def _ingest_url(app: Appliance, url: str) -> RunReport | SyncJob:
    if not app.settings.allow_url_ingest:
        raise UrlIngestDisabled(f"URL ingest is disabled on this server, so {url} was not fetched")
    return app.ingest_url_bounded(url)


def serve_stdio(environment: Environment, overrides: Overrides, *, ready_fd: int | None = None) -> None:
    """`minirag serve`: MCP on stdin/stdout until the client disconnects, then exit. Logs go to stderr only.

    The warm-up (the service, LanceDB, fastembed, the model, the index) starts on its own thread
    once the client has listed the tools (WarmUpAfterListing), so a first query finds the model
    loaded or loading (a client that calls a tool without listing them loads what the call needs).
    The SDK's stdio transport owns fd 0 and fd 1 while it serves (stray output from libraries and
    child processes goes to stderr). `ready_fd` (the container's entrypoint
    passes a pipe) is written to and closed when the warm-up has finished: the entrypoint starts
    the sync scheduler then (or after its limit), not beside the server's first seconds.
    """
    from appliance.platform import stopping

    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stopping.exit_on_signals()
    runtime = Runtime(environment, overrides)
    if ready_fd is not None:
        threading.Thread(target=_tell_when_warm, args=(runtime, ready_fd), name="ready", daemon=True).start()
    server = create_server(runtime)
    threading.Thread(target=_watch_client, args=(os.dup(0), os.dup(1)), name="client-watch", daemon=True).start()
    try:
        server.run(transport="stdio", show_banner=False)
    except BaseException as exc:  # noqa: BLE001 - a client gone mid-reply (a broken pipe), Ctrl-C: leave the same way
        log.info("the MCP session ended: %s", _why(exc))
    os.dup2(2, 1)  # the transport gave fd 1 back to the client: what still runs may not write to it
    # The client closed stdin (or its end of stdout): a sync_start job stops (its write in flight
    # finishes) and nothing else (a conversion, a query, the warm-up) is waited for. Never a normal
    # interpreter exit: it would wait for the sync's threads and abort inside the model's.
    stopping.exit_when_quiet("the MCP client disconnected")


def _watch_client(stdin: int, stdout: int) -> None:
    """Stop the moment the client is gone, whatever a tool call is doing.

    The protocol loop notices a hang-up only between messages, and waits for a tool call running in a
    thread (an ingest_file of a long document, minutes of embedding) before it returns. This watch
    sees the client close its end of stdout (POLLERR) or of stdin once everything sent was read
    (POLLHUP, nothing unread: requests still in the pipe are served as before) and leaves as the loop
    would: the stop is requested (conversions killed, the embedding abandoned), the write in flight
    gets its seconds, the process ends."""
    import fcntl
    import select
    import termios
    import time

    watch = select.poll()
    watch.register(stdin, 0)  # no events asked for: only POLLHUP/POLLERR wake us, never data for the server
    watch.register(stdout, 0)
    gone = select.POLLHUP | select.POLLERR
    try:
        while True:
            ready = dict(watch.poll())
            if ready.get(stdout, 0) & gone:
                break
            if ready.get(stdin, 0) & gone:
                unread = bytearray(4)
                fcntl.ioctl(stdin, termios.FIONREAD, unread)
                if not int.from_bytes(unread, sys.byteorder):
                    break
                time.sleep(0.1)  # the reader is still draining the last requests
            if ready.get(stdin, 0) & select.POLLNVAL or ready.get(stdout, 0) & select.POLLNVAL:
                return
    except OSError:
        return
    from appliance.platform import stopping

    log.info("the MCP client is gone; stopping")
    stopping.exit_when_quiet("the MCP client disconnected")


def _why(exc: BaseException) -> str:
    """The first leaf of an exception group (the transport's task group wraps a broken pipe)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _tell_when_warm(runtime: Runtime, fd: int) -> None:
    runtime.warmed.wait()
    with contextlib.suppress(OSError):  # the reader left: nobody is waiting for the news
        os.write(fd, b"warm\n")
    os.close(fd)
