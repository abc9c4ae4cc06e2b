"""How the configuration and the index are doing: `status`, and the roots with their file counts."""
from __future__ import annotations

from appliance import __version__
from appliance.core import Core
from appliance.errors import ApplianceError, IndexMismatch
from appliance.ingest.chunk import SCHEME_VERSION
from appliance.ingest.discover import ignore_problems
from appliance.ingest.ocr import ocr_status
from appliance.locking import lock_holder
from appliance.results import IndexHealth, ModelInfo, RootCounts, RootList, Status
from appliance.state import read_last_sync, read_scheduler_state, running_sync
from appliance.store import IDENTITY_FILE


def status(core: Core) -> Status:
    """Configuration and index health; never raises for a broken index."""
    name, hint = ocr_status(core.ocr_config())
    model = ModelInfo(id=core.spec.id, dim=core.spec.dim, max_seq_length=core.spec.max_seq_length,
                      baked=(core.settings.models_dir / core.spec.dir_name / "model.onnx").is_file())
    budget = index = index_error = None
    try:
        budget = core.budget
        index = _index_health(core)
    except ApplianceError as exc:
        index_error = exc.to_dict()
    return Status(version=__version__, config=core.settings.describe(), ocr=name, ocr_hint=hint or None, model=model,
                  chunk_token_budget=budget, index=index, index_error=index_error,
                  sync_running=running_sync(core.settings.db_path),
                  scheduler=read_scheduler_state(core.settings.db_path),
                  last_sync=read_last_sync(core.settings.db_path),
                  ignore_problems=ignore_problems(core.settings.roots),  # rules files that could not be applied
                  dictionaries=core.dictionaries.describe())


def _index_health(core: Core) -> IndexHealth:
    """What the index holds, with a warning for each thing a sync should repair; raises when it cannot be read."""
    core.index.checkout_latest()  # what any process committed before the call, as every read does
    sources = core.index.source_rows()
    foreign = core.foreign_roots(sources)
    roots_warning = (f"{sum(foreign.values())} indexed files lie under roots this process was "
                     "not given; a sync refuses until they are mounted where the index knows "
                     "them or dropped with `minirag sync --forget-roots`") if foreign else None
    chunk_count = core.index.count_chunks()
    unindexed = core.index.unindexed_rows()
    has_keyword_index = core.index.has_fts_index()
    has_vector_index = core.index.has_vector_index()
    stale = core.index.count_chunks_not_cut_by(SCHEME_VERSION) if chunk_count else 0
    scheme_warning = (f"{stale} chunks were cut by an older chunking scheme; "
                      "run `minirag sync` to re-cut them") if stale else None
    identity = core.index.read_identity()
    recorded = sum(s.chunk_count for s in sources if not s.error_code)
    consistency_warning = None
    if recorded != chunk_count and lock_holder(core.settings.db_path) is None:  # not mid-sync
        consistency_warning = (f"the sources table records {recorded} chunks, the chunks table holds "
                               f"{chunk_count} (an interrupted write or a damaged table); "
                               "run `minirag sync` to repair, or `minirag sync --clean` to rebuild")
    identity_warning = None
    if identity is None and chunk_count:
        identity_warning = (f"{core.index.db_path / IDENTITY_FILE} is missing, so the model the "
                            "vectors were made with is unknown; run `minirag sync --full` to rebuild "
                            "with the configured model")
    problem = core.identity_problem()
    return IndexHealth(
        db_path=str(core.settings.db_path), source_count=sum(1 for s in sources if not s.error_code),
        failed_count=sum(1 for s in sources if s.error_code), unconfigured_roots=foreign or None,
        roots_warning=roots_warning, chunk_count=chunk_count, unindexed_rows=unindexed,
        has_keyword_index=has_keyword_index, has_vector_index=has_vector_index,
        query_path=core.index.query_path(chunk_count), stale_chunk_count=stale,
        scheme_warning=scheme_warning, identity=identity.__dict__ if identity else None,
        consistency_warning=consistency_warning, identity_warning=identity_warning,
        identity_mismatch=problem or None, identity_hint=IndexMismatch.hint if problem else None)


def list_roots(core: Core) -> RootList:
    """The configured roots by name and path, with their indexed and failed file counts, and the
    counts of ingest_data and URL items (which belong to no root)."""
    from appliance.ingest.discover import root_names

    named = list(zip(root_names(core.settings.roots), core.settings.roots, strict=True))
    try:
        core.index.checkout_latest()
        sources = core.index.source_rows()
    except ApplianceError as exc:
        return RootList(roots=[RootCounts(name=name, path=str(path), exists=path.is_dir()) for name, path in named],
                        index_error=exc.to_dict())
    roots = []
    for name, path in named:
        mine = [s for s in sources if s.source_kind == "file" and s.root == str(path)]
        roots.append(RootCounts(name=name, path=str(path), exists=path.is_dir(),
                                indexed_files=sum(1 for s in mine if not s.error_code),
                                failed_files=sum(1 for s in mine if s.error_code)))
    return RootList(roots=roots, data_sources=sum(1 for s in sources if s.source_kind == "data"),
                    url_sources=sum(1 for s in sources if s.source_kind == "url"),
                    unconfigured_roots=core.foreign_roots(sources) or None)
