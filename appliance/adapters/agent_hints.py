"""Next actions worded for an agent: the MCP adapter names its tools where the CLI names commands.

An error's hint names what to run next as errors.NextAction, and the MCP server words each with
`say`: a command with an MCP equivalent becomes that tool, one without (a rebuild, a model bake)
is marked as the operator's to run. The status's texts are worded the same way: the index's
warnings are Hints, and the records other processes stored (the last sync's report, the scheduler's
state) keep their Hints' templates and actions beside the CLI's words (errors.storable).
"""
from __future__ import annotations

from appliance.errors import NextAction

_TOOLS = {"sync": "sync_start", "list": "list_files", "status": "status", "read": "read_file",
          "ingest": "ingest_file", "delete": "delete_file", "query": "query_documents", "grep": "grep",
          "read-neighbors": "read_chunk_neighbors", "ingest-url": "ingest_url"}
_TOOL_OPTIONS = {("sync", "--allow-deletions"): "allowDeletions=true"}
"""Options of a command whose tool takes them as an argument; any other option is the operator's."""


def say(action: NextAction) -> str:
    """`action` as an agent reads it: the MCP tool that does it, or the operator's command."""
    command, _, rest = f"{action.command} {action.args}".strip().partition(" ")
    tool = _TOOLS.get(command)
    if tool is not None and not rest.startswith("-"):
        return f"the `{tool}` tool"
    if tool is not None and (argument := _TOOL_OPTIONS.get((command, rest))) is not None:
        return f"the `{tool}` tool with {argument}"
    return f"{action.for_cli()} (an operator's command on the appliance's host, not an MCP tool)"

