"""How the configuration and the index are doing: `status`, and the roots with their file counts."""
from __future__ import annotations

import os
import time

from appliance import __version__
from appliance.core import Resources
from appliance.errors import ApplianceError, Hint, IndexMismatch, NextAction
from appliance.ingest.chunk import SCHEME_VERSION
from appliance.ingest.discover import ignore_problems
from appliance.ingest.ocr import ocr_status
from appliance.results import (
    ErrorInfo,
    FirstSync,
    IndexHealth,
    ModelInfo,
    RootCounts,
    RootList,
    Status,
    SyncRunning,
)
from appliance.storage.locking import lock_holder
from appliance.sync.state import (
    SCHEDULER_START_LIMIT_S,
    process_started_at,
    read_last_sync,
    read_scheduler_state,
    running_sync,
)

SYNC = NextAction("sync")
"""What most of the warnings below ask for."""


def status(core: Resources) -> Status:
    """Configuration and index health; never raises for a broken index."""
    name, hint = ocr_status(core.ocr_config())
    model = ModelInfo(id=core.spec.id, dim=core.spec.dim, max_seq_length=core.spec.max_seq_length,
                      baked=(core.settings.models_dir / core.spec.dir_name / "model.onnx").is_file())
    budget = index = index_error = None
    try:
        budget = core.budget
        index = _index_health(core)
    except ApplianceError as exc:
        index_error = ErrorInfo.of(exc)
    db_path = core.settings.db_path
    running, scheduler, last = running_sync(db_path), read_scheduler_state(db_path), read_last_sync(db_path)
    empty = index is not None and not (index.source_count or index.failed_count)
    pending = running is None and index_error is None and (empty or last is None or last.get("scope") is not None)
    return Status(version=__version__, config=core.settings.describe(), ocr=name, ocr_hint=hint or None, model=model,
                  chunk_token_budget=budget, index=index, index_error=index_error,
                  sync_running=SyncRunning.model_validate(running) if running else None, scheduler=scheduler,
                  last_sync=last,
                  ignore_problems=ignore_problems(core.settings.roots),  # rules files that could not be applied
                  first_sync=first_sync(core, scheduler) if pending else None,
                  dictionaries=core.dictionaries.describe())


def first_sync(core: Resources, scheduler: dict[str, object] | None, now: float | None = None) -> FirstSync:
    """When the sync that fills an empty (or never wholly synced) index starts, as far as this process can tell.

    A live scheduler says it in nextRunAt. In the container's stdio mode the scheduler is started by
    the entrypoint (PID 1) once the server has loaded its model, at the latest SCHEDULER_START_LIMIT_S
    after the container started, and then syncs at once (scheduler.first_run_at)."""
    now = time.time() if now is None else now
    live = scheduler is not None and scheduler.get("alive") is not False and scheduler.get("state") != "stopped"
    if live and scheduler is not None:
        if scheduler.get("state") == "off":
            return FirstSync(message=Hint("scheduled sync is off (SYNC_INTERVAL=0); start one with {}", SYNC))
        at = scheduler.get("nextRunAt")
        if scheduler.get("state") == "waiting":
            problem = _text(scheduler.get("problem"))
            return _at(at, now, Hint("the scheduler cannot sync yet: {}; it looks again", problem))
        if isinstance(at, int | float):
            return _at(at, now, "the index is empty or was never synced whole; the scheduler's sync starts")
    interval = core.settings.sync_interval_s
    # PID 1 itself is a one-off command (`docker run IMAGE status`: the entrypoint exec'd it), in a container where
    # neither a server nor a scheduler runs
    if core.settings.container and interval > 0 and os.getpid() != 1:
        started = process_started_at(1)
        bound = started + SCHEDULER_START_LIMIT_S if started is not None else None
        return _at(bound if bound is not None and bound > now else None, now,
                   "the index is empty or was never synced whole; the scheduler starts once the server has "
                   f"loaded its model (at most {SCHEDULER_START_LIMIT_S:g} s after the container started) and "
                   "syncs at once")
    return FirstSync(message=Hint("the index is empty or was never synced whole and no scheduler runs here; "
                                  "start a sync with {}", SYNC))


def unfilled(core: Resources) -> FirstSync | None:
    """Why a query found nothing when the index holds no chunks yet, and when a sync fills it; None when it
    holds some (the query itself matched nothing) or cannot be read (the query would have said so)."""
    try:
        if core.index.registry.count_chunks():
            return None
    except ApplianceError:
        return None
    db_path = core.settings.db_path
    if running_sync(db_path) is not None:
        return FirstSync(message=Hint("the index holds nothing yet; a sync is filling it now (progress: {})",
                                      NextAction("status")))
    return first_sync(core, read_scheduler_state(db_path))


def _text(value: object) -> str:
    """A text of another process's record: a Hint as it was read back, anything else as text."""
    return value if isinstance(value, str) else str(value)


def _at(at: object, now: float, message: str) -> FirstSync:
    if not isinstance(at, int | float):
        return FirstSync(message=message)
    wait = max(0.0, round(at - now, 1))
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    return FirstSync(starts_at=at, starts_in_seconds=wait,
                     message=Hint("{} {}", message, "now" if not wait else f"at {when} (in {wait:g} s)"))


def _index_health(core: Resources) -> IndexHealth:
    """What the index holds, with a warning for each thing a sync should repair; raises when it cannot be read."""
    core.index.checkout_latest()  # what any process committed before the call, as every read does
    sources = core.index.registry.source_rows()
    foreign = core.foreign_roots(sources)
    roots_warning = Hint("{} indexed files lie under roots this process was not given; a sync refuses until "
                         "they are mounted where the index knows them or dropped with {}",
                         str(sum(foreign.values())), NextAction("sync", "--forget-roots")) if foreign else None
    chunk_count = core.index.registry.count_chunks()
    unindexed = core.index.writes.unindexed_rows()
    has_keyword_index = core.index.writes.has_fts_index()
    has_vector_index = core.index.writes.has_vector_index()
    stale = core.index.registry.count_chunks_not_cut_by(SCHEME_VERSION) if chunk_count else 0
    scheme_warning = Hint("{} chunks were cut by an older chunking scheme; run {} to re-cut them",
                          str(stale), SYNC) if stale else None
    identity = core.index.read_identity()
    if identity is not None and identity.scheme != SCHEME_VERSION:  # served: same model, same vector space
        scheme_warning = Hint("the index records chunking scheme {}, this version cuts {}; its chunks are searched "
                              "as they are (the configured model made every vector) and {} re-cuts what another "
                              "scheme cut{}", repr(identity.scheme), repr(SCHEME_VERSION), SYNC,
                              f" ({stale} chunks)" if stale else "")
    recorded = sum(s.chunk_count for s in sources if not s.error_code)
    consistency_warning: str | None = None
    if recorded != chunk_count and lock_holder(core.settings.db_path) is None:  # not mid-sync
        consistency_warning = Hint("the sources table records {} chunks, the chunks table holds {} (an interrupted "
                                   "write or a damaged table); run {} to repair, or {} to rebuild",
                                   str(recorded), str(chunk_count), SYNC, NextAction("sync", "--clean"))
    identity_warning: str | None = None
    if identity is None and chunk_count:
        identity_warning = Hint("{} is missing, so the model the vectors were made with is unknown; run {} to "
                                "rebuild with the configured model", core.index.identity_location,
                                NextAction("sync", "--full"))
    problem = core.identity_problem()
    return IndexHealth(
        db_path=core.settings.index_location, source_count=sum(1 for s in sources if not s.error_code),
        failed_count=sum(1 for s in sources if s.error_code), unconfigured_roots=foreign or None,
        roots_warning=roots_warning, chunk_count=chunk_count, unindexed_rows=unindexed,
        has_keyword_index=has_keyword_index, has_vector_index=has_vector_index,
        query_path=core.index.reader.query_path(chunk_count), stale_chunk_count=stale,
        scheme_warning=scheme_warning, identity=identity.__dict__ if identity else None,
        consistency_warning=consistency_warning, identity_warning=identity_warning,
        identity_mismatch=problem or None, identity_hint=IndexMismatch.hint if problem else None)


def list_roots(core: Resources) -> RootList:
    """The configured roots by name and path, with their indexed and failed file counts, and the
    counts of ingest_data and URL items (which belong to no root)."""
    from appliance.ingest.discover import root_names

    named = list(zip(root_names(core.settings.roots), core.settings.roots, strict=True))
    try:
        core.index.checkout_latest()
        sources = core.index.registry.source_rows()
    except ApplianceError as exc:
        return RootList(roots=[RootCounts(name=name, path=str(path), exists=path.is_dir()) for name, path in named],
                        index_error=ErrorInfo.of(exc))
    roots = []
    for name, path in named:
        mine = [s for s in sources if s.source_kind == "file" and s.root == str(path)]
        roots.append(RootCounts(name=name, path=str(path), exists=path.is_dir(),
                                indexed_files=sum(1 for s in mine if not s.error_code),
                                failed_files=sum(1 for s in mine if s.error_code)))
    return RootList(roots=roots, data_sources=sum(1 for s in sources if s.source_kind == "data"),
                    url_sources=sum(1 for s in sources if s.source_kind == "url"),
                    unconfigured_roots=core.foreign_roots(sources) or None)
