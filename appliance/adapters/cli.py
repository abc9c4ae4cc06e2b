"""The `minirag` command: parse arguments, call the service, print.

With no subcommand it serves MCP on stdio. Errors are translated here once:
`error: <message>` and the hint on stderr (or the error object with --json),
exit status 1. `status` answers even when the configuration is broken. Names (paths,
source ids, titles, sheets) and one-line excerpts are printed through appliance.assemble.quoting.label,
so none of them can start a line of its own.
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from appliance import __version__
from appliance.assemble.citations import hit_place
from appliance.assemble.paging import READ_PAGE_CHARS
from appliance.assemble.quoting import label
from appliance.config import Environment, Overrides, Settings, read_environment
from appliance.errors import ApplianceError
from appliance.models.cli import models_app
from appliance.results import ErrorInfo, IndexedFile, StatusUnavailable

if TYPE_CHECKING:
    from appliance.assemble.passages import SectionsMode
    from appliance.results import Explanation, Status
    from appliance.service import Appliance, Progress, RunReport

app = typer.Typer(add_completion=False, no_args_is_help=False, rich_markup_mode=None,
                  help="Offline document search for AI agents. With no command: the MCP server on stdio.")
app.add_typer(models_app, name="models")

BaseDir = Annotated[list[str] | None, typer.Option(
    "--base-dir", help="Document root (repeatable); overrides BASE_DIR/BASE_DIRS.")]
DbPath = Annotated[str | None, typer.Option("--db-path", help="Index directory (DB_PATH).")]
ModelsDir = Annotated[str | None, typer.Option("--models-dir", help="Baked models directory (MODELS_DIR).")]
ModelName = Annotated[str | None, typer.Option("--model-name", help="Embedding model id (MODEL_NAME).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _environment(ctx: typer.Context) -> Environment:
    """The environment this process read once: main() passes it, else the app's callback reads it."""
    environment = ctx.find_object(Environment)
    assert environment is not None, "the minirag app's callback reads the environment before any command"
    return environment


def _settings(ctx: typer.Context, base_dir: list[str] | None, db_path: str | None, models_dir: str | None,
              model_name: str | None, **changes: Any) -> Settings:
    from dataclasses import replace

    settings = _environment(ctx).settings(base_dirs=base_dir, db_path=db_path, models_dir=models_dir,
                                          model_name=model_name)
    return replace(settings, **changes) if changes else settings


def _appliance(ctx: typer.Context, base_dir: list[str] | None, db_path: str | None, models_dir: str | None,
               model_name: str | None, **changes: Any) -> Appliance:
    return _open(_settings(ctx, base_dir, db_path, models_dir, model_name, **changes))


def _open(settings: Settings) -> Appliance:
    from appliance.service import Appliance  # after the settings: a broken one is reported without loading LanceDB

    service = Appliance(settings)
    if _held is not None:
        _held.append(service)
    return service


_held: list[Appliance] | None = None
"""Under main(), what the command opened, held to the end of the process: main() then ends the
process at once instead of freeing the model's session, its 250k-piece tokenizer and the index
handles piece by piece (~1 s after a `minirag sync`; the kernel takes the memory back). Everything
a command writes is committed before it returns."""


def _emit(data: object, as_json: bool, human: str | None = None) -> None:
    if as_json or human is None:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(human + "\n")


@contextmanager
def _reported(as_json: bool) -> Iterator[None]:
    try:
        yield
    except ApplianceError as exc:
        if as_json:
            _emit({"error": exc.to_dict()}, True)
        else:
            typer.echo(f"error: {label(exc.message)}", err=True)
            if exc.hint:
                typer.echo(f"hint: {label(exc.hint)}", err=True)
        raise typer.Exit(1) from None


@contextmanager
def _progress(enabled: bool) -> Iterator[Progress | None]:
    """A progress bar on a terminal; one line every ~10 s when piped (cron, `docker run … sync`);
    silent under --json."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        import logging

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger = logging.getLogger("appliance.sync")  # state.SyncProgress logs there
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            yield None
        finally:
            logger.removeHandler(handler)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[path]}", markup=False), console=Console(stderr=True),
                  transient=True) as bar:  # a name like "[/x].md" is not rich markup
        task = bar.add_task("indexing", total=None, path="")

        def update(phase: str, done: int, total: int, path: str) -> None:
            bar.update(task, description=phase, completed=done, total=total or None, path=label(path)[-60:])

        yield update


def _print_run(report: RunReport, as_json: bool) -> None:
    r = report
    for item in r.failed:
        typer.echo(f"warn: {label(item.path)}: {label(item.reason)}", err=True)
    for held in r.held_roots:
        typer.echo(f"error: {label(held.reason)}", err=True)
    for item in r.rules_set_aside:
        typer.echo(f"note: {label(item.path)}: {label(item.reason)}", err=True)
    by_code = Counter(item.code for item in r.skipped)
    left_out = f" ({', '.join(f'{code} {n}' for code, n in sorted(by_code.items()))}; `minirag list` names them)" \
        if by_code else ""
    human = (f"seen {r.seen}: added {r.added}, updated {r.updated}, unchanged {r.unchanged}, "
             f"refreshed {r.refreshed}, deleted {r.deleted}, skipped {r.skipped_count}{left_out}, "
             f"failed {r.failed_count}; {r.chunks} chunks ({r.chunks_embedded} embedded, "
             f"{r.chunks_reused} reused) in {r.seconds:.1f} s")
    _emit(r.wire(), as_json, human)
    if not report.ok:
        raise typer.Exit(1)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context,
          version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)
    if not isinstance(ctx.obj, Environment):  # run without main(), as by a test's CliRunner
        ctx.obj = read_environment()
    if ctx.invoked_subcommand is None:
        from appliance.adapters.mcp_server import serve_stdio

        serve_stdio(ctx.obj, {})


@app.command()
def serve(ctx: typer.Context, base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
          model_name: ModelName = None,
          ready_fd: Annotated[int | None, typer.Option(
              "--ready-fd", hidden=True, help="A pipe to tell when the model and index are loaded.")] = None) -> None:
    """Run the MCP server on stdio (the default with no command)."""
    from appliance.adapters.mcp_server import serve_stdio

    serve_stdio(_environment(ctx),
                {"base_dirs": base_dir, "db_path": db_path, "models_dir": models_dir, "model_name": model_name},
                ready_fd=ready_fd)


@app.command()
def ingest(ctx: typer.Context, paths: Annotated[list[str], typer.Argument(help="Files or directories (recursive).")],
           base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
           model_name: ModelName = None, as_json: AsJson = False) -> None:
    """Index files and folders, replacing what was indexed for them."""
    with _reported(as_json), _progress(not as_json) as progress:
        report = _appliance(ctx, base_dir, db_path, models_dir, model_name).ingest(paths, progress=progress)
    _print_run(report, as_json)


@app.command("ingest-url")
def ingest_url(ctx: typer.Context, url: Annotated[str, typer.Argument(help="An http(s) URL.")],
               source: Annotated[str | None, typer.Option("--source", help="Source id (default: the URL).")] = None,
               base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
               model_name: ModelName = None, as_json: AsJson = False) -> None:
    """Fetch a web page and index it (only with ALLOW_URL_INGEST=1 and a network); waits until it is indexed."""
    if not as_json and sys.stderr.isatty():  # no job here: say what the wait is for (~4,000 chars/s to embed)
        typer.echo(f"fetching and indexing {url} ...", err=True)
    with _reported(as_json):
        report = _appliance(ctx, base_dir, db_path, models_dir, model_name).ingest_url(url, source_id=source)
    _print_run(report, as_json)


@app.command()
def sync(ctx: typer.Context,
         path: Annotated[str | None, typer.Argument(help="Reconcile only under this path.")] = None,
         full: Annotated[bool, typer.Option(
             "--full", help="Re-ingest everything in place (after a model or budget change).")] = False,
         clean: Annotated[bool, typer.Option(
             "--clean", help="Rebuild everything: files, and ingest_data/URL items from their stored text.")] = False,
         discard_unrecoverable: Annotated[bool, typer.Option(
             "--discard-unrecoverable",
             help="With --clean: drop ingest_data/URL items whose stored text is unreadable.")] = False,
         forget_roots: Annotated[bool, typer.Option(
             "--forget-roots", help="Drop indexed files of roots that are no longer configured.")] = False,
         allow_deletions: Annotated[bool, typer.Option(
             "--allow-deletions", help="Delete the indexed files of a root that is missing, empty or lost more "
                                       "than SYNC_DELETE_LIMIT percent of its files (kept otherwise).")] = False,
         no_snapshot_dedupe: Annotated[bool, typer.Option(
             "--no-snapshot-dedupe", help="Store every dated snapshot in full.")] = False,
         ray: Annotated[str | None, typer.Option(
             "--ray", metavar="ADDRESS", help="Convert and embed on this Ray cluster (HOST:PORT, auto, local; "
                                              "default RAY_ADDRESS); this process writes the index.")] = None,
         here: Annotated[bool, typer.Option(
             "--here", help="Sync in this process even when a warm server on this index could.")] = False,
         base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
         model_name: ModelName = None, as_json: AsJson = False) -> None:
    """Make the index equal to the files on disk. SIGTERM/Ctrl-C stop it within seconds (exit 143/130);
    what was written stays and the next sync finishes the rest. A whole-index sync is run by a warm
    MCP server or daemon on the same index and configuration when one is up (appliance/sync/runner.py).
    A root that is missing, unreadable, empty or lost most of its files keeps them (exit 1) unless
    --allow-deletions."""
    from appliance.platform import stopping
    from appliance.sync.runner import SyncRequest, run

    signals: list[int] = []
    stopping.on_signals(signals.append)
    try:
        with _reported(as_json), _progress(not as_json) as progress:
            changes = {"snapshot_dedupe": False} if no_snapshot_dedupe else {}
            settings = _settings(ctx, base_dir, db_path, models_dir, model_name, **changes)
            request = SyncRequest(path, full=full, clean=clean, discard_unrecoverable=discard_unrecoverable,
                                  forget_roots=forget_roots, allow_deletions=allow_deletions, here=here,
                                  ray_address=ray)
            outcome = run(settings, request, "cli", lambda: _open(settings), progress=progress)
            if outcome.route == "handoff" and not as_json:
                typer.echo("(run by the warm server on this index)", err=True)
    except stopping.Stopped as exc:
        typer.echo(f"sync stopped ({exc}): what was written stays; run `minirag sync` again to finish", err=True)
        stopping.hard_exit(128 + (signals[0] if signals else 15))
    _print_run(outcome.report, as_json)


@app.command()
def query(ctx: typer.Context, text: Annotated[str, typer.Argument(help="What to search for.")],
          top_k: Annotated[int, typer.Option("--top-k", help="Results to return (1-100).")] = 10,
          scope: Annotated[str | None, typer.Option(
              "--scope", help="Only under this path or source-id prefix.")] = None,
          doc_class: Annotated[str | None, typer.Option("--doc-class", help="Only sources of this class.")] = None,
          markdown: Annotated[bool, typer.Option("--markdown", help="One Markdown block: numbered hits, citations, "
                                                                    "surrounding lines.")] = False,
          context_lines: Annotated[int, typer.Option("--context-lines", help="With --markdown: lines around "
                                                                              "each passage (0-20).")] = 3,
          sections: Annotated[str, typer.Option("--sections", help=(
              "With --json: each hit's section around the hits (excerpt), whole (full) or none."))] = "excerpt",
          explain: Annotated[bool, typer.Option("--explain", help="Show each hit's rank on the vector and keyword "
                                                                  "side and the query terms it matched.")] = False,
          base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
          model_name: ModelName = None, as_json: AsJson = False) -> None:
    """Hybrid search over the index."""
    if markdown:
        with _reported(as_json):
            gathered = _appliance(ctx, base_dir, db_path, models_dir, model_name).gather(
                text, top_k=top_k, scope=scope, doc_class=doc_class, context_lines=context_lines)
        why = f"\n{gathered.empty_index.message}\n" if gathered.empty_index else ""
        _emit(gathered.wire(), as_json, gathered.markdown + why)
        return
    with _reported(as_json):
        result = _appliance(ctx, base_dir, db_path, models_dir, model_name).search(
            text, top_k=top_k, scope=scope, doc_class=doc_class, sections=cast("SectionsMode", sections),
            explain=explain)
    lines = []
    for n, hit in enumerate(result.results, 1):
        where = label(hit.display_path) + hit_place(hit)
        dist = "-" if hit.distance is None else f"{hit.distance:.3f}"
        lines.append(f"{n:2}. {where}  [chunk {hit.chunk_index}, distance {dist}]"
                     + (f"  — {label(hit.title)}" if hit.title else ""))
        lines.append("    " + label(" ".join(hit.text.split())[:300]))
        if hit.explain:
            lines.append("    " + explain_line(hit.explain))
    nothing = f"no results: {result.empty_index.message}" if result.empty_index else "no results"
    _emit(result.wire(), as_json, "\n".join(lines) or nothing)


def explain_line(explain: Explanation) -> str:
    """`--explain` in one line: both sides' ranks and the matched terms with where each came from."""
    def side(rank: int | None) -> str:
        return "-" if rank is None else str(rank)

    terms = []
    for m in explain.matched:
        origin = {"query": "", "compound": f" (part of {m.get('compound')})",
                  "translation": f" ({m.get('pair')}, {m.get('dictionary')})"}[m["kind"] or "query"]
        came_from = "" if m["term"] == m["word"] else f" <- {m['word']}"
        terms.append(f"{m['term']}{came_from}{origin}")
    return (f"why: vector rank {side(explain.vector_rank)}, keyword rank {side(explain.keyword_rank)}; "
            f"matched: {', '.join(terms) or 'none'}")


@app.command()
def read(ctx: typer.Context, target: Annotated[str | None, typer.Argument(help="A file path.")] = None,
         source: Annotated[str | None, typer.Option("--source", help="A data or URL source id.")] = None,
         offset: Annotated[int, typer.Option("--offset", help="Start at this character (a page's nextOffset).")] = 0,
         max_chars: Annotated[int | None, typer.Option(
             "--max-chars", help="Print one page of at most this many characters.")] = None,
         start_line: Annotated[int | None, typer.Option(
             "--start-line", help="First line (1-based; sources with lines).")] = None,
         end_line: Annotated[int | None, typer.Option("--end-line", help="Last line (inclusive).")] = None,
         page_start: Annotated[int | None, typer.Option("--page-start", help="First page or slide (1-based).")] = None,
         page_end: Annotated[int | None, typer.Option("--page-end", help="Last page or slide (inclusive).")] = None,
         base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
         model_name: ModelName = None, as_json: AsJson = False) -> None:
    """Print an indexed document, rebuilt from its chunks (all of it, some lines or pages, or one page of
    text with --max-chars)."""
    with _reported(as_json):
        doc = _appliance(ctx, base_dir, db_path, models_dir, model_name).read(
            source or target or "", source is not None, offset=offset, max_chars=max_chars,
            start_line=start_line, end_line=end_line, page_start=page_start, page_end=page_end)
    _emit(doc.wire(), as_json, doc.content)
    if not as_json and doc.next_offset is not None:
        typer.echo(f"[{doc.remaining_chars} more characters: --offset {doc.next_offset}]", err=True)


@app.command("read-neighbors")
def read_neighbors(ctx: typer.Context, file_path: Annotated[str | None, typer.Option("--file-path")] = None,
                   source: Annotated[str | None, typer.Option("--source")] = None,
                   chunk_index: Annotated[int, typer.Option("--chunk-index")] = 0,
                   before: Annotated[int, typer.Option("--before")] = 2,
                   after: Annotated[int, typer.Option("--after")] = 2,
                   max_chars: Annotated[int, typer.Option(
                       "--max-chars", help="Most characters of text.")] = READ_PAGE_CHARS,
                   base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
                   model_name: ModelName = None, as_json: AsJson = False) -> None:
    """Print the chunks before and after one chunk (at most --max-chars of text; the rest is counted)."""
    with _reported(as_json):
        out = _appliance(ctx, base_dir, db_path, models_dir, model_name).read_neighbors(
            source or file_path or "", source is not None, chunk_index, before=before, after=after,
            max_chars=max_chars)
    _emit(out.wire(), as_json, "\n\n".join(f"[{c.chunk_index}{hit_place(c)}] {c.text}" for c in out.chunks))
    if not as_json and (out.omitted_before or out.omitted_after):
        typer.echo(f"({out.omitted_before} chunks before and {out.omitted_after} after left out; "
                   "raise --max-chars or ask again from the first/last chunk shown)", err=True)


@app.command("list")
def list_(ctx: typer.Context, scope: Annotated[str | None, typer.Option("--scope")] = None,
          ignored: Annotated[bool, typer.Option("--ignored", help="Also show files excluded by rules.")] = False,
          limit: Annotated[int | None, typer.Option(
              "--limit", help="Print one page of at most this many entries (1-5000).")] = None,
          cursor: Annotated[str | None, typer.Option(
              "--cursor", help="Continue after a page (its nextCursor).")] = None,
          base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
          model_name: ModelName = None, as_json: AsJson = False) -> None:
    """List every file under the roots with its state, and indexed data/URL sources (all of them,
    or one page with --limit/--cursor)."""
    with _reported(as_json):
        out = _appliance(ctx, base_dir, db_path, models_dir, model_name).list_files(
            scope=scope, include_ignored=ignored, limit=limit, cursor=cursor)
    if out.next_cursor and not as_json:
        typer.echo(f"more: {out.total} entries in all; next page: --cursor {out.next_cursor}", err=True)
    lines = []
    for f in out.files:
        extra = f" ({label(f.reason)})" if f.reason else ""
        ocr = f" [ocr:{f.ocr_engine}]" if isinstance(f, IndexedFile) and f.ocr_engine else ""
        lines.append(f"{f.state:9} {label(f.file_path)}{ocr}{extra}")
    lines += [f"{s.source_kind:9} {label(s.source)}" for s in out.sources]
    _emit(out.wire(), as_json, "\n".join(lines) or "no files under the roots")


@app.command()
def status(ctx: typer.Context, base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
           model_name: ModelName = None, as_json: AsJson = False) -> None:
    """Configuration and index health. Exits 0 even when the configuration is broken."""
    try:
        out: Status | StatusUnavailable = _appliance(ctx, base_dir, db_path, models_dir, model_name).status()
    except ApplianceError as exc:
        out = StatusUnavailable(version=__version__, config_error=ErrorInfo.of(exc))
    _emit(out.wire(), True)


@app.command()
def delete(ctx: typer.Context, target: Annotated[str | None, typer.Argument(help="A file path.")] = None,
           source: Annotated[str | None, typer.Option("--source", help="A data or URL source id.")] = None,
           base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
           model_name: ModelName = None, as_json: AsJson = False) -> None:
    """Remove a document from the index (the file on disk is untouched)."""
    with _reported(as_json):
        deleted = _appliance(ctx, base_dir, db_path, models_dir, model_name).delete(source or target or "",
                                                                                    source is not None)
    _emit(deleted.wire(), as_json, f"deleted {label(deleted.source)} ({deleted.chunks_removed} chunks)")


@app.command()
def grep(ctx: typer.Context,
         pattern: Annotated[str, typer.Argument(help="Text to find (a regular expression with --regex).")],
         regex: Annotated[bool, typer.Option("--regex", help="Treat PATTERN as a Python regular expression.")] = False,
         case_sensitive: Annotated[bool, typer.Option("--case-sensitive")] = False,
         scope: Annotated[str | None, typer.Option("--scope", help="Only under this path.")] = None,
         root: Annotated[str | None, typer.Option(
             "--root", help="Only this root (its name or path; see `minirag roots`).")] = None,
         file_glob: Annotated[str | None, typer.Option(
             "--glob", help="Only display paths matching this .gitignore-style glob, e.g. '*.pdf'.")] = None,
         max_results: Annotated[int, typer.Option("--max-results", help="At most this many lines (1-500).")] = 100,
         base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
         model_name: ModelName = None, as_json: AsJson = False) -> None:
    """Exact-match search over the indexed text of every document (PDF, Office, scans, text, data and URL
    items): file, place (line, page, slide, sheet), line."""
    with _reported(as_json):
        out = _appliance(ctx, base_dir, db_path, models_dir, model_name).grep(
            pattern, regex=regex, case_sensitive=case_sensitive, scope=scope, root=root, file_glob=file_glob,
            max_results=max_results)
    lines = [f"{label(hit.source)}{hit_place(hit)}: {label(hit.line)}" for hit in out.matches]
    if out.truncated or out.stopped:
        lines.append(f"(stopped early: {out.stopped or 'max results reached'})")
    if not as_json:
        typer.echo(f"searched {out.documents_searched} of {out.documents_indexed} indexed documents"
                   + (f"; {out.note}" if out.note else ""), err=True)
    _emit(out.wire(), as_json, "\n".join(lines) or "no matches")


@app.command()
def roots(ctx: typer.Context, base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
          model_name: ModelName = None, as_json: AsJson = False) -> None:
    """List the document roots by name and path, with their indexed and failed file counts."""
    with _reported(as_json):
        out = _appliance(ctx, base_dir, db_path, models_dir, model_name).list_roots()
    lines = [f"{label(r.name)}\t{label(r.path)}\t{r.indexed_files} indexed, {r.failed_files} failed"
             + ("" if r.exists else " (missing)") for r in out.roots]
    lines.append(f"data items: {out.data_sources}, url items: {out.url_sources}")
    _emit(out.wire(), as_json, "\n".join(lines))


@app.command()
def scheduler(ctx: typer.Context) -> None:
    """Run Appliance.sync() every SYNC_INTERVAL seconds (0 = off) until SIGTERM; state in DB_PATH/scheduler.json."""
    from appliance.adapters.scheduler import main as scheduler_main

    raise typer.Exit(scheduler_main(_environment(ctx)))


@app.command("serve-http")
def serve_http(ctx: typer.Context,
               address: Annotated[str, typer.Argument(
                   metavar="HOST:PORT", help="Where to listen, e.g. 127.0.0.1:8080.")] = "127.0.0.1:8080",
               base_dir: BaseDir = None, db_path: DbPath = None, models_dir: ModelsDir = None,
               model_name: ModelName = None) -> None:
    """Run the MCP server over streamable HTTP at /mcp (a non-loopback address needs MCP_AUTH_TOKEN)."""
    from appliance.adapters.http_server import main as http_main

    overrides: Overrides = {"base_dirs": base_dir, "db_path": db_path, "models_dir": models_dir,
                            "model_name": model_name}
    raise typer.Exit(http_main(address, _environment(ctx), overrides))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, hidden=True)
def entrypoint(ctx: typer.Context) -> None:
    """The container entrypoint: stdio MCP + scheduler, `daemon`, `sync`, or any minirag command."""
    from appliance.adapters.entrypoint import main as entry_main

    raise typer.Exit(entry_main(list(ctx.args), _environment(ctx)))


def main() -> None:
    # The composition root: the environment is read here, once, and handed to the command.
    # Offline switches go in before any library that reads them is imported; the
    # guard refuses every outbound connection except the URL fetcher's own (off while
    # ALLOW_URL_INGEST is unreadable), and stays off only while baking models (the one
    # step that may download).
    from appliance.platform import netguard

    netguard.apply_offline_env()
    environment = read_environment()
    if sys.argv[1:2] != ["models"]:
        netguard.install(allow_fetch=environment.allow_url_ingest)
    global _held
    _held = []
    try:
        app(obj=environment)
    except SystemExit as done:
        if _held:  # a one-shot command that opened the index has finished (see _held)
            from appliance.platform.stopping import hard_exit

            hard_exit(done.code if isinstance(done.code, int) else 0 if done.code is None else 1)
        raise
