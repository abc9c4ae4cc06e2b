"""How the configuration and the index are doing: `status`, and the roots with their file counts."""
from __future__ import annotations

from typing import Any

from appliance import __version__
from appliance.core import Core
from appliance.errors import ApplianceError, IndexMismatch
from appliance.ingest.chunk import SCHEME_VERSION
from appliance.ingest.discover import ignore_problems
from appliance.ingest.ocr import ocr_status
from appliance.locking import lock_holder
from appliance.state import read_last_sync, read_scheduler_state, running_sync
from appliance.store import IDENTITY_FILE


def status(core: Core) -> dict[str, Any]:
    """Configuration and index health; never raises for a broken index."""
    out: dict[str, Any] = {"version": __version__, "config": core.settings.describe()}
    name, hint = ocr_status(core.ocr_config())
    out["ocr"] = name
    if hint:
        out["ocrHint"] = hint
    out["model"] = {"id": core.spec.id, "dim": core.spec.dim, "maxSeqLength": core.spec.max_seq_length,
                    "baked": (core.settings.models_dir / core.spec.dir_name / "model.onnx").is_file()}
    try:
        out["chunkTokenBudget"] = core.budget
        index: dict[str, Any] = {"dbPath": str(core.settings.db_path)}
        sources = core.index.source_rows()
        index["sourceCount"] = sum(1 for s in sources if not s.error_code)
        index["failedCount"] = sum(1 for s in sources if s.error_code)
        foreign = core.foreign_roots(sources)
        if foreign:
            index["unconfiguredRoots"] = foreign
            index["rootsWarning"] = (f"{sum(foreign.values())} indexed files lie under roots this process was "
                                     "not given; a sync refuses until they are mounted where the index knows "
                                     "them or dropped with `minirag sync --forget-roots`")
        index["chunkCount"] = core.index.count_chunks()
        index["unindexedRows"] = core.index.unindexed_rows()
        index["hasKeywordIndex"] = core.index.has_fts_index()
        index["hasVectorIndex"] = core.index.has_vector_index()
        stale = core.index.count_chunks_not_cut_by(SCHEME_VERSION) if index["chunkCount"] else 0
        index["staleChunkCount"] = stale
        if stale:
            index["schemeWarning"] = (f"{stale} chunks were cut by an older chunking scheme; "
                                      "run `minirag sync` to re-cut them")
        identity = core.index.read_identity()
        index["identity"] = identity.__dict__ if identity else None
        recorded = sum(s.chunk_count for s in sources if not s.error_code)
        if recorded != index["chunkCount"] and lock_holder(core.settings.db_path) is None:  # not mid-sync
            index["consistencyWarning"] = (f"the sources table records {recorded} chunks, the chunks table holds "
                                           f"{index['chunkCount']} (an interrupted write or a damaged table); "
                                           "run `minirag sync` to repair, or `minirag sync --clean` to rebuild")
        if identity is None and index["chunkCount"]:
            index["identityWarning"] = (f"{core.index.db_path / IDENTITY_FILE} is missing, so the model the "
                                        "vectors were made with is unknown; run `minirag sync --full` to rebuild "
                                        "with the configured model")
        problem = core.identity_problem()
        if problem:
            index["identityMismatch"] = problem
            index["identityHint"] = IndexMismatch.hint
        out["index"] = index
    except ApplianceError as exc:
        out["indexError"] = exc.to_dict()
    out["syncRunning"] = running_sync(core.settings.db_path)
    out["scheduler"] = read_scheduler_state(core.settings.db_path)
    out["lastSync"] = read_last_sync(core.settings.db_path)
    out["ignoreProblems"] = ignore_problems(core.settings.roots)  # rules files that could not be applied
    return out


def list_roots(core: Core) -> dict[str, Any]:
    """The configured roots by name and path, with their indexed and failed file counts, and the
    counts of ingest_data and URL items (which belong to no root)."""
    from appliance.ingest.discover import root_names

    roots: list[dict[str, Any]] = [
        {"name": name, "path": str(path), "exists": path.is_dir(), "indexedFiles": None, "failedFiles": None}
        for name, path in zip(root_names(core.settings.roots), core.settings.roots, strict=True)]
    out: dict[str, Any] = {"roots": roots, "dataSources": None, "urlSources": None}
    try:
        sources = core.index.source_rows()
    except ApplianceError as exc:
        return out | {"indexError": exc.to_dict()}
    for entry in roots:
        mine = [s for s in sources if s.source_kind == "file" and s.root == entry["path"]]
        entry["indexedFiles"] = sum(1 for s in mine if not s.error_code)
        entry["failedFiles"] = sum(1 for s in mine if s.error_code)
    out["dataSources"] = sum(1 for s in sources if s.source_kind == "data")
    out["urlSources"] = sum(1 for s in sources if s.source_kind == "url")
    foreign = core.foreign_roots(sources)
    if foreign:
        out["unconfiguredRoots"] = foreign
    return out
