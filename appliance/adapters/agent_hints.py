"""Next actions worded for an agent: the MCP adapter names its tools where the CLI names commands.

An error's hint names what to run next as errors.NextAction, and the MCP server words each with
`say`: a command with an MCP equivalent becomes that tool, one without (a rebuild, a model bake)
is marked as the operator's to run. The status also carries texts other processes wrote in the
CLI's words (the last sync's report, the scheduler's state, the index's warnings): `for_agents`
words the commands they name the same way.
"""
from __future__ import annotations

import re

from appliance.errors import NextAction

_COMMAND = re.compile(r"`minirag ([a-z][a-z-]*)((?: [^`]*)?)`")
_TOOLS = {"sync": "sync_start", "list": "list_files", "status": "status", "read": "read_file",
          "ingest": "ingest_file", "delete": "delete_file", "query": "query_documents", "grep": "grep",
          "read-neighbors": "read_chunk_neighbors", "ingest-url": "ingest_url"}


def say(action: NextAction) -> str:
    """`action` as an agent reads it: the MCP tool that does it, or the operator's command."""
    command, _, rest = f"{action.command} {action.args}".strip().partition(" ")
    tool = _TOOLS.get(command)
    if tool is not None and not rest.startswith("-"):
        return f"the `{tool}` tool"
    return f"{action.for_cli()} (an operator's command on the appliance's host, not an MCP tool)"


def for_agents(value: object) -> object:
    """`value` (a string, or dicts and lists of them) with the CLI commands it names worded by `say`."""
    if isinstance(value, str):
        return _COMMAND.sub(lambda m: say(NextAction(m.group(1), m.group(2).strip())), value) \
            if "`minirag " in value else value
    if isinstance(value, dict):
        return {key: for_agents(item) for key, item in value.items()}
    if isinstance(value, list):
        return [for_agents(item) for item in value]
    return value
