"""Hints worded for an agent: the MCP adapter names MCP tools where the service's hints name CLI commands.

The service words its hints for the person at a shell (`minirag sync`). Over MCP the
reader is an agent that cannot run commands: a command with an MCP equivalent becomes
that tool, and one without (a rebuild, a model bake) is marked as the operator's to run.
"""
from __future__ import annotations

import re
from typing import Any

_COMMAND = re.compile(r"`minirag ([a-z][a-z-]*)((?: [^`]*)?)`")
_TOOLS = {"sync": "sync_start", "list": "list_files", "status": "status", "read": "read_file",
          "ingest": "ingest_file", "delete": "delete_file", "query": "query_documents", "grep": "grep",
          "read-neighbors": "read_chunk_neighbors", "ingest-url": "ingest_url"}


def _reword(match: re.Match[str]) -> str:
    command, rest = match.group(1), match.group(2)
    tool = _TOOLS.get(command)
    if tool is not None and not rest.strip().startswith("-"):
        return f"the `{tool}` tool"
    return f"`minirag {command}{rest}` (an operator's command on the appliance's host, not an MCP tool)"


def for_agents(value: Any) -> Any:
    """`value` (a string, or dicts and lists of them) with CLI commands reworded for an MCP client."""
    if isinstance(value, str):
        return _COMMAND.sub(_reword, value) if "`minirag " in value else value
    if isinstance(value, dict):
        return {key: for_agents(item) for key, item in value.items()}
    if isinstance(value, list):
        return [for_agents(item) for item in value]
    return value
