"""The MCP tools' output schemas: each tool's result records (appliance.results) or the error.

The records are the shapes: their JSON schemas (camelCase names, each field's description)
are what tools/list promises. fastmcp would derive a schema from a tool's return annotation,
but it wraps a union (not an object) under "result" and writes the text content its own way;
the tools return their records' wire data themselves, so the schema is given here.
"""
from __future__ import annotations

import operator
from functools import reduce

from pydantic import BaseModel, TypeAdapter

from appliance.record import Record
from appliance.results import (
    Deleted,
    Document,
    ErrorInfo,
    FileList,
    GrepResults,
    Neighbors,
    RootList,
    RunReport,
    SearchMarkdown,
    SearchResults,
    Status,
    StatusUnavailable,
    SyncActivity,
    SyncJob,
)

Schema = dict[str, object]


class ErrorResult(BaseModel):
    """The shape of every failed call (sent with isError set)."""

    error: ErrorInfo


def output_schema(*results: type[Record], name: str | None = None, description: str | None = None) -> Schema:
    """One of `results` (a union named `name`), or the error: some clients validate error results
    against the output schema too."""
    name = name or results[0].__name__
    schema = TypeAdapter[object](reduce(operator.or_, results)).json_schema(by_alias=True)
    error = ErrorResult.model_json_schema(by_alias=True)
    defs = schema.pop("$defs", {}) | error.pop("$defs", {})
    if description:
        schema["description"] = description
    return {"type": "object", "anyOf": [{"$ref": f"#/$defs/{name}"}, {"$ref": "#/$defs/ErrorResult"}],
            "$defs": defs | {name: schema, "ErrorResult": error}}


SYNC_JOB = output_schema(SyncJob)
SYNC_STATUS = output_schema(SyncJob, SyncActivity, name="SyncStatus",
                            description="One job (with a jobId), or the index's sync activity (without).")
RUN_REPORT = output_schema(RunReport)
INGEST_OUTCOME = output_schema(RunReport, SyncJob, name="IngestOutcome", description=(
    "The finished run report, or (content above INGEST_FOREGROUND_MAX_BYTES) the job embedding it."))
SEARCH_ANSWER = output_schema(SearchResults, SearchMarkdown, name="SearchAnswer",
                              description='The JSON answer, or (format "markdown") one Markdown block.')
NEIGHBORS = output_schema(Neighbors)
DOCUMENT = output_schema(Document)
FILE_LIST = output_schema(FileList)
DELETED = output_schema(Deleted)
GREP_RESULTS = output_schema(GrepResults)
ROOT_LIST = output_schema(RootList)
STATUS = output_schema(Status, StatusUnavailable, name="StatusAnswer", description=(
    "Configuration and index health; configError instead when the configuration cannot be used."))
