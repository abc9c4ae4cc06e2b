"""The MCP tools' result shapes: what the output schemas promise and what clients read.

The service's records (appliance.results) are the shapes: `record_model` makes each one a
pydantic model, with its fields under their wire names (camelCase, as wire.to_wire renders
them) and the descriptions the records give (`Annotated[..., Doc(...)]`), so a field added to
a record reaches the output schema with nothing to edit here. What is written here is what no
record of the service holds: the error envelope (errors are raised, and the adapters write them),
the status answer when the configuration is broken (the adapters write it too), the progress of
the running sync (another process's file, passed on as it was written, keys unknown to this
version included), and the unions of results.

Every model tolerates extra fields, so a field the service grows later reaches
clients without a schema change breaking validation on their side.
"""
from __future__ import annotations

import copy
import dataclasses
import types
import typing
from functools import cache, reduce
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    create_model,
    model_serializer,
)

from appliance import results
from appliance.results import ABSENT_WHEN_NONE, NULL_IN_TOOLS, Doc
from appliance.wire import camel


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


_CONFIG_ERROR = "Set when the configuration is invalid; every other tool refuses until it is fixed."


class ErrorInfo(_Out):
    code: str = Field(description="Stable machine-readable code, e.g. invalid_argument, not_found, config_error.")
    message: str = Field(description="One sentence: what went wrong and to what.")
    hint: str | None = Field(None, description="What to do about it.")


class ErrorResult(BaseModel):
    """The shape of every failed call (sent with isError set)."""

    error: ErrorInfo


class SyncRunning(_Out):
    """The sync holding the index's lock now, whichever process started it."""
    pid: int | None = None
    startedAt: float | None = None
    startedBy: str | None = Field(None, description="scheduler, mcp (sync_start) or cli (minirag sync, make sync).")
    phase: Literal["scanning", "indexing", "finishing"] | None = Field(
        None, description="Null when the running sync publishes no progress (an older version).")
    filesSeen: int | None = Field(None, description="Files found so far while scanning.")
    filesDone: int | None = Field(None, description="Files of filesTotal whose chunks (or failure) are written.")
    filesTotal: int | None = Field(None, description="Files this sync (re-)indexes.")
    filesConverted: int | None = Field(None, description="Files converted and cut into chunks so far.")
    chunksWritten: int | None = Field(None, description="Chunks embedded and written so far.")
    chunksTotal: int | None = Field(None, description=(
        "Chunks the sync will write: exact once chunksTotalKnown, else estimated from the files converted."))
    chunksTotalKnown: bool | None = Field(None, description="Every file is converted: chunksTotal is exact.")
    chunksPerSecond: float | None = Field(None, description="Chunks written per second since indexing began.")
    chunksEmbedded: int | None = Field(None, description="Chunks sent to the embedding model so far.")
    chunksReused: int | None = Field(None, description="Chunks that reused a vector the index held for the same text.")
    currentPath: str | None = None
    filesPerSecond: float | None = None
    etaSeconds: int | None = Field(None, description=(
        "Estimated seconds until every chunk is written (chunks left / chunksPerSecond); null until known."))
    updatedAt: float | None = None


class StatusUnavailable(_Out):
    """status when the configuration cannot be used: the version, what is wrong, and the settings read."""

    version: str
    configError: ErrorInfo = Field(description=_CONFIG_ERROR)
    syncRunning: SyncRunning | None = None
    lastSync: dict[str, Any] | None = None


# ---- the records' models

class _Record(BaseModel):
    """A record's model: its fields under their wire names, extra fields kept. A field the record
    leaves out of the wire when None (ABSENT_WHEN_NONE) is left out here too, unless the tools
    write it as null (NULL_IN_TOOLS)."""

    model_config = ConfigDict(extra="allow")
    omitted_when_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        for name in self.omitted_when_none:
            if data.get(name, 0) is None:
                del data[name]
        return data


FIELD_SHAPES: dict[tuple[type, str], Any] = {
    (results.SyncJob, "error"): ErrorInfo | None,
    (results.SyncJob, "progress"): SyncRunning | None,
    (results.SyncActivity, "running"): SyncRunning | None,
    (results.Status, "sync_running"): SyncRunning | None,
    (results.RootList, "index_error"): ErrorInfo | None,
}
"""Record fields the service keeps as dicts whose shape is written above."""


@cache
def record_model(record: type) -> type[BaseModel]:
    """The model of a record of appliance.results (a frozen dataclass) in its wire shape."""
    hints = typing.get_type_hints(record, include_extras=True)
    fields: dict[str, Any] = {}
    omitted = set()
    for f in dataclasses.fields(record):
        hint, description = hints[f.name], None
        if typing.get_origin(hint) is Annotated:
            hint, *extras = typing.get_args(hint)
            description = next((e.text for e in extras if isinstance(e, Doc)), None)
        shape = FIELD_SHAPES.get((record, f.name)) or _wire_type(hint)
        if f.default is not dataclasses.MISSING:
            info = Field(f.default, description=description)
        elif f.default_factory is not dataclasses.MISSING:
            info = Field(default_factory=f.default_factory, description=description)
        elif f.metadata.get(ABSENT_WHEN_NONE):
            info = Field(None, description=description)
        else:
            info = Field(description=description)
        if f.metadata.get(ABSENT_WHEN_NONE) and not f.metadata.get(NULL_IN_TOOLS):
            omitted.add(camel(f.name))
        fields[camel(f.name)] = (shape, info)
    model: type[_Record] = create_model(record.__name__, __base__=_Record, **fields)
    model.omitted_when_none = frozenset(omitted)
    return model


def _wire_type(hint: Any) -> Any:
    """A record's field type with every record in it replaced by its model."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return record_model(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return _union(*(_wire_type(a) for a in args))
    if origin in (list, dict):
        return types.GenericAlias(origin, tuple(_wire_type(a) for a in args))
    return hint


def _union(*members: Any) -> Any:
    return reduce(lambda a, b: Union[a, b], members)  # noqa: UP007 (members are values, not written types)


StatusReport = create_model("StatusReport", __base__=record_model(results.Status), configError=(
    ErrorInfo | None, Field(None, description=_CONFIG_ERROR)))
"""status: the record, and configError (null: the configuration is fine)."""


# ---- what each tool returns

@dataclasses.dataclass(frozen=True, eq=False)
class Shape:
    """A tool's result: its name in the output schema, and the type its data is validated and written by."""

    name: str
    type: Any
    description: str | None = None

    @property
    def adapter(self) -> TypeAdapter[Any]:
        return _adapter(self)

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the result (a fresh copy: several tools share a shape, every tool the error's)."""
        return copy.deepcopy(_json_schema(self))

    def render(self, data: Any) -> dict[str, Any]:
        """`data` (wire-shaped) validated, as the JSON data the tool returns."""
        out: dict[str, Any] = self.adapter.dump_python(self.adapter.validate_python(data), mode="json")
        return out


@cache
def _adapter(shape: Shape) -> TypeAdapter[Any]:
    return TypeAdapter(shape.type)


@cache
def _json_schema(shape: Shape) -> dict[str, Any]:
    schema = shape.adapter.json_schema()
    if shape.description:
        schema["description"] = shape.description
    return schema


def _record(record: type) -> Shape:
    return Shape(record.__name__, record_model(record))


ERROR = Shape("ErrorResult", ErrorResult)
SYNC_JOB = _record(results.SyncJob)
SYNC_STATUS = Shape("SyncStatus", _union(SYNC_JOB.type, record_model(results.SyncActivity)),
                    "One job (with a jobId), or the index's sync activity (without).")
RUN_REPORT = _record(results.RunReport)
INGEST_OUTCOME = Shape("IngestOutcome", _union(RUN_REPORT.type, SYNC_JOB.type), (
    "The finished run report, or (content above INGEST_FOREGROUND_MAX_BYTES) the job embedding it."))
SEARCH_RESULTS = _record(results.SearchResults)
SEARCH_MARKDOWN = _record(results.SearchMarkdown)
SEARCH_ANSWER = Shape("SearchAnswer", _union(SEARCH_RESULTS.type, SEARCH_MARKDOWN.type),
                      'The JSON answer, or (format "markdown") one Markdown block.')
NEIGHBORS = _record(results.Neighbors)
DOCUMENT = _record(results.Document)
FILE_LIST = _record(results.FileList)
DELETED = _record(results.Deleted)
GREP_RESULTS = _record(results.GrepResults)
ROOT_LIST = _record(results.RootList)
STATUS = Shape("Status", _union(StatusReport, StatusUnavailable), (
    "Configuration and index health; configError instead when the configuration cannot be used."))
