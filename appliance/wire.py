"""The service's records in their wire shapes (camelCase JSON), for the CLI and the MCP server alone."""
from __future__ import annotations

import dataclasses
from typing import Any

from appliance.results import ABSENT_WHEN_NONE


def camel(name: str) -> str:
    """snake_case -> camelCase: chunks_removed -> chunksRemoved."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def to_wire(value: Any) -> Any:
    """A record (and the records inside it) as JSON data: fields in declaration order under camelCase names;
    a dict's keys are data (paths, settings, error fields) and pass unchanged."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None and f.metadata.get(ABSENT_WHEN_NONE):
                continue
            out[camel(f.name)] = to_wire(item)
        return out
    if isinstance(value, dict):
        return {key: to_wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_wire(item) for item in value]
    return value
