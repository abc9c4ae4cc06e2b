"""CLI commands in hints become MCP tools (or an operator's command) for agents."""
from __future__ import annotations

from appliance.adapters.agent_hints import for_agents


def test_a_command_with_an_mcp_equivalent_names_the_tool() -> None:
    assert for_agents("Run `minirag sync` (or ingest the file) first; `minirag list` shows what is indexed.") == \
        "Run the `sync_start` tool (or ingest the file) first; the `list_files` tool shows what is indexed."


def test_a_command_an_agent_cannot_run_is_marked_as_the_operators() -> None:
    out = for_agents("run `minirag sync --clean` to rebuild")
    assert out == ("run `minirag sync --clean` (an operator's command on the appliance's host, not an MCP tool) "
                   "to rebuild")
    assert "operator" in for_agents("bake it with `minirag models bake`")


def test_structures_are_reworded_throughout_and_other_text_is_left_alone() -> None:
    data = {"code": "not_found", "hint": "`minirag status` says why", "n": 3,
            "warnings": ["see `minirag read`", "plain text"]}
    assert for_agents(data) == {"code": "not_found", "hint": "the `status` tool says why", "n": 3,
                                "warnings": ["see the `read_file` tool", "plain text"]}
    assert for_agents("minirag sync without backticks") == "minirag sync without backticks"


def test_an_errors_next_actions_are_worded_by_each_reader() -> None:
    """An error names what to run next as NextActions: the CLI prints the commands, the MCP server the
    tools (or the operator's command), from one template and the same words around them."""
    from appliance.adapters.agent_hints import say
    from appliance.errors import Hint, IndexMismatch, NextAction, NotFound
    from appliance.results import ErrorInfo

    missing = NotFound("Nothing indexed for /d/a.md", hint=Hint(
        "Run {} (or ingest the file) first; {} shows what is indexed.", NextAction("sync"), NextAction("list")))
    assert missing.hint == "Run `minirag sync` (or ingest the file) first; `minirag list` shows what is indexed."
    assert ErrorInfo.of(missing).wire()["hint"] == missing.hint  # the CLI's JSON, and what stored records keep
    assert ErrorInfo.of(missing).wire(tools=True, say=say)["hint"] == \
        "Run the `sync_start` tool (or ingest the file) first; the `list_files` tool shows what is indexed."
    rebuild = ErrorInfo.of(IndexMismatch("The index was built with another model")).wire(tools=True, say=say)
    assert rebuild["hint"] == ("Run `minirag sync --full` (an operator's command on the appliance's host, not an "
                               "MCP tool) to rebuild the index with the current model and budget, or point DB_PATH "
                               "elsewhere.")
    for text in (missing.hint, IndexMismatch.hint):  # the structured wording is the one agents always got
        assert ErrorInfo(code="x", message="y", hint=text).wire()["hint"] == text
        assert for_agents(text) in (ErrorInfo.of(missing).wire(tools=True, say=say)["hint"], rebuild["hint"])


def test_an_index_error_inside_a_result_is_worded_for_agents_too() -> None:
    """list_roots' indexError used to reach agents in the CLI's words (only top-level and job errors were
    reworded); every error a tool's result holds is worded by the same `say` now."""
    from appliance.adapters.agent_hints import say
    from appliance.errors import IndexCorrupt
    from appliance.results import ErrorInfo, RootList

    listed = RootList(roots=[], index_error=ErrorInfo.of(IndexCorrupt("The index cannot be read")))
    assert "`minirag sync --clean` to rebuild" in str(listed.wire()["indexError"])
    hint = listed.wire(tools=True, say=say)["indexError"]
    assert isinstance(hint, dict) and hint["hint"].startswith(
        "Run `minirag sync --clean` (an operator's command on the appliance's host, not an MCP tool) to rebuild")
