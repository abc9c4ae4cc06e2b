"""A broken configuration, in process: `status` answers with the error naming the variable, the rest refuses."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fastmcp import Client
from typer.testing import CliRunner

from appliance.adapters.instructions import POLICY
from appliance.adapters.mcp_server import Runtime, create_server
from appliance.config import VARIABLES, read_environment


def _call(server: Any, name: str, args: dict[str, Any] | None = None) -> Any:
    async def run() -> Any:
        async with Client(server) as client:
            return await client.call_tool(name, args or {}, raise_on_error=False)

    return asyncio.run(run())


def test_mcp_status_reports_the_bad_variable_and_other_tools_refuse(tmp_path: Path) -> None:
    environment = read_environment({"BASE_DIR": str(tmp_path), "RAG_HYBRID_WEIGHT": "lots",
                                    "MCP_INSTRUCTIONS_EXTRA": "Cite pages."})
    server = create_server(Runtime(environment))
    assert server.instructions == POLICY  # no operator line from a configuration that cannot be used
    status = _call(server, "status")
    assert not status.is_error
    error = status.structured_content["configError"]
    assert error["code"] == "config_error" and error["message"] == "RAG_HYBRID_WEIGHT must be a number, not 'lots'"
    assert "config" not in status.structured_content
    refused = _call(server, "query_documents", {"query": "anything"})
    assert refused.is_error and refused.structured_content["error"]["message"].startswith("RAG_HYBRID_WEIGHT")


def test_cli_status_answers_with_a_broken_configuration(tmp_path: Path) -> None:
    from appliance.adapters.cli import app

    env: dict[str, str | None] = dict.fromkeys(VARIABLES)  # only what the test sets
    env |= {"BASE_DIR": str(tmp_path), "DB_PATH": str(tmp_path / "index"), "CONVERT_WORKERS": "0"}
    runner = CliRunner()
    out = runner.invoke(app, ["status"], env=env)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["configError"]["message"] == "CONVERT_WORKERS must be at least 1, not 0"
    failed = runner.invoke(app, ["list", "--json"], env=env)
    assert failed.exit_code == 1 and json.loads(failed.stdout)["error"]["code"] == "config_error"
