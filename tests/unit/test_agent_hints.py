"""Next actions worded for each reader: the CLI names commands, the MCP server its tools (or the
operator's command), from one structured hint, also when another process stored the text."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from appliance.adapters.agent_hints import say
from appliance.adapters.cli import app as cli_app
from appliance.adapters.scheduler import Scheduler
from appliance.config import load_settings
from appliance.errors import NEXT_ACTIONS, Hint, IndexCorrupt, IndexMismatch, NextAction, NotFound, restored, storable
from appliance.results import ErrorInfo, RootList
from appliance.sync.state import LAST_SYNC_FILE, SCHEDULER_FILE, process_marker, read_scheduler_state
from tests.fixtures.embedders import MODELS_DIR
from tests.fixtures.mcp_calls import ok, serve
from tests.integration.test_emptied_root import _app

OPERATOR = "(an operator's command on the appliance's host, not an MCP tool)"


def _cli_status(tmp_path: Path) -> dict[str, Any]:
    """`minirag status --json` on the index under tmp_path, as the CLI prints it."""
    env = {"BASE_DIR": str(tmp_path / "docs"), "DB_PATH": str(tmp_path / "db"), "MODELS_DIR": str(MODELS_DIR)}
    out = CliRunner().invoke(cli_app, ["status", "--json"], env=env)
    assert out.exit_code == 0, out.output
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def test_an_errors_next_actions_are_worded_by_each_reader() -> None:
    """An error names what to run next as NextActions: the CLI prints the commands, the MCP server the
    tools (or the operator's command), from one template and the same words around them."""
    missing = NotFound("Nothing indexed for /d/a.md", hint=Hint(
        "Run {} (or ingest the file) first; {} shows what is indexed.", NextAction("sync"), NextAction("list")))
    assert missing.hint == "Run `minirag sync` (or ingest the file) first; `minirag list` shows what is indexed."
    assert ErrorInfo.of(missing).wire()["hint"] == missing.hint  # the CLI's JSON
    assert ErrorInfo.of(missing).wire(tools=True, say=say)["hint"] == \
        "Run the `sync_start` tool (or ingest the file) first; the `list_files` tool shows what is indexed."
    rebuild = ErrorInfo.of(IndexMismatch("The index was built with another model")).wire(tools=True, say=say)
    assert rebuild["hint"] == (f"Run `minirag sync --full` {OPERATOR} to rebuild the index with the current model "
                               "and budget, or point DB_PATH elsewhere.")
    assert ErrorInfo(code="x", message="y", hint="plain `minirag sync` text").wire(tools=True, say=say)["hint"] == \
        "plain `minirag sync` text"  # no Hint, no rewording: nothing is reworded by pattern



def test_an_option_a_tool_takes_as_an_argument_is_worded_as_that_tool() -> None:
    """`sync --allow-deletions` has a tool equivalent (sync_start's allowDeletions); `sync --clean` has none."""
    assert say(NextAction("sync", "--allow-deletions")) == "the `sync_start` tool with allowDeletions=true"
    assert say(NextAction("sync", "--clean")) == f"`minirag sync --clean` {OPERATOR}"
    assert say(NextAction("sync")) == "the `sync_start` tool"

def test_an_index_error_inside_a_result_is_worded_for_agents_too() -> None:
    """list_roots' indexError used to reach agents in the CLI's words (only top-level and job errors were
    reworded); every error a tool's result holds is worded by the same `say` now."""
    listed = RootList(roots=[], index_error=ErrorInfo.of(IndexCorrupt("The index cannot be read")))
    assert "`minirag sync --clean` to rebuild" in str(listed.wire()["indexError"])
    hint = listed.wire(tools=True, say=say)["indexError"]
    assert isinstance(hint, dict) and hint["hint"].startswith(f"Run `minirag sync --clean` {OPERATOR} to rebuild")


def test_a_stored_hint_keeps_its_template_and_actions_beside_the_cli_words() -> None:
    """What a record keeps on disk: the CLI's text where it always was, the Hint's template and places
    beside it; read back it is the same Hint. A text edited since, or an older record's plain text,
    is read as written."""
    inner = Hint("Run {} first", NextAction("models bake"))
    record = {"problem": Hint("no model in {} ({})", "/m", inner), "n": 3, "items": [{"reason": inner}]}
    stored = json.loads(json.dumps(storable(record)))
    assert stored["problem"] == "no model in /m (Run `minirag models bake` first)"
    assert stored[NEXT_ACTIONS]["problem"]["template"] == "no model in {} ({})"
    back = restored(stored)
    assert isinstance(back["problem"], Hint) and isinstance(back["items"][0]["reason"], Hint)
    assert NEXT_ACTIONS not in back and back["problem"].worded(say) == f"no model in /m (Run `minirag models bake` " \
                                                                      f"{OPERATOR} first)"
    assert restored(storable(back)) == back  # written again (the scheduler's next round): the same
    edited = stored | {"problem": "fixed by hand"}
    assert restored(edited)["problem"] == "fixed by hand" and not isinstance(restored(edited)["problem"], Hint)


def test_a_stored_scheduler_error_reaches_mcp_status_worded_and_the_cli_in_its_words(tmp_path: Path) -> None:
    """The scheduler (its own process) records why it cannot sync: no baked model. The MCP status tool
    words the command it names as the operator's, exactly as an error's hint; the CLI prints the command."""
    server, docs = serve(tmp_path)
    scheduler = Scheduler(load_settings({"BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "db"),
                                         "MODELS_DIR": str(tmp_path / "no-models")}))
    scheduler.round()  # the round it runs: the model is not baked in its models folder
    stored = json.loads((tmp_path / "db" / SCHEDULER_FILE).read_text())
    assert "bake it with `minirag models bake` or mount" in stored["problem"]
    assert stored[NEXT_ACTIONS]["problem"]["places"][-1] == {"command": "models bake", "args": ""}

    agent = ok(server, "status")["scheduler"]
    assert f"bake it with `minirag models bake` {OPERATOR} or mount" in agent["problem"]
    assert agent["lastError"]["message"] == agent["problem"] and NEXT_ACTIONS not in agent
    assert f"`minirag models bake` {OPERATOR}" in ok(server, "status")["firstSync"]["message"]

    cli = _cli_status(tmp_path)
    assert cli["scheduler"]["problem"] == stored["problem"] and "operator" not in json.dumps(cli)
    assert NEXT_ACTIONS not in json.dumps(cli)


def test_a_stored_last_sync_failure_reaches_mcp_status_worded_and_the_cli_in_its_words(tmp_path: Path) -> None:
    """A sync that kept the files of a vanished root says how to accept the deletion; the last-sync record
    keeps that next action, and each reader gets it in its words."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nText.\n")
    app = _app(tmp_path, docs)
    app.sync()
    shutil.rmtree(docs)
    assert app.sync().held_roots
    server, _ = serve(tmp_path)
    [held] = ok(server, "status")["lastSync"]["heldRoots"]
    assert held["reason"].endswith("run the `sync_start` tool with allowDeletions=true")
    [cli] = _cli_status(tmp_path)["lastSync"]["heldRoots"]
    assert cli["reason"].endswith("run `minirag sync --allow-deletions`")
    assert NEXT_ACTIONS not in cli
    tool, command = "the `sync_start` tool with allowDeletions=true", "`minirag sync --allow-deletions`"
    assert held["reason"].replace(tool, command) == cli["reason"]


def test_an_older_record_with_plain_text_hints_reads_as_written(tmp_path: Path) -> None:
    """Records an older version stored hold plain texts: every reader shows them as written."""
    server, _ = serve(tmp_path)
    db = tmp_path / "db"
    db.mkdir(exist_ok=True)
    text = "bake it with `minirag models bake` or mount a baked models folder"
    (db / SCHEDULER_FILE).write_text(json.dumps({"schema": 1, "pid": os.getpid(), **process_marker(),
                                                 "state": "idle", "problem": text,
                                                 "lastError": {"code": "setup_problem", "message": text}}))
    reason = "the document root /d is missing; run `minirag sync --allow-deletions`"
    (db / LAST_SYNC_FILE).write_text(json.dumps({"seen": 0, "added": 0, "updated": 0, "unchanged": 0,
                                                 "heldRoots": [{"root": "/d", "reason": reason}]}))
    assert read_scheduler_state(db)["problem"] == text  # type: ignore[index]
    for status in (ok(server, "status"), _cli_status(tmp_path)):
        assert status["scheduler"]["problem"] == text and status["scheduler"]["lastError"]["message"] == text
        assert status["lastSync"]["heldRoots"][0]["reason"] == reason
