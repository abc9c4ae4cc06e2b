"""DNS rebinding against a real tokenless `minirag serve-http 127.0.0.1:PORT` (appliance/adapters/host_guard.py).

A page of another site that rebinds its name to 127.0.0.1 sends its own name in Host and its
origin in Origin; a loopback server without MCP_AUTH_TOKEN (as the README allows) must refuse
both on every endpoint, and still answer its own names and clients that send no Origin.
"""
from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.serve_http import MINIRAG, http, minirag_env, start_serve_http, stop

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.timeout(900)]

INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "rebinding-test", "version": "1"}}}).encode()
MCP = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("rebinding")
    docs = base / "docs"
    docs.mkdir()
    (docs / "secret.md").write_text("# Secret\n\nThe launch code is 0000.\n")
    env = minirag_env(docs, base / "index")
    env.pop("MCP_AUTH_TOKEN", None)
    done = subprocess.run([*MINIRAG, "sync", "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert json.loads(done.stdout)["added"] == 1, done.stderr[-2000:]
    proc, url = start_serve_http(env, base / "server.log")
    try:
        yield {"url": url, "docs": docs}
    finally:
        stop(proc)


def error_code(answer: tuple[int, dict[str, str], bytes]) -> str:
    status, _, body = answer
    assert status == 403, (status, body[:300])
    return str(json.loads(body)["error"]["code"])


def test_a_rebound_name_gets_403_on_every_endpoint(server: dict[str, Any]) -> None:
    url, secret = server["url"], Path(server["docs"]) / "secret.md"
    attacker = {"Host": "attacker.example", "Origin": "http://attacker.example"}
    for path in (f"/api/read?path={secret}", "/api/status", "/api/search?q=launch", "/"):
        assert error_code(http(f"{url}{path}", token=None, headers=attacker)) == "forbidden_host"
    assert error_code(http(f"{url}/mcp", token=None, data=INIT, headers={**MCP, **attacker})) == "forbidden_host"
    # the right Host, but a page of another site: refused by its Origin
    assert error_code(http(f"{url}/mcp", token=None, data=INIT, headers={**MCP, "Origin": "http://attacker.example"})) \
        == "forbidden_origin"
    assert error_code(http(f"{url}/logout", token=None, data=b"", headers={"Origin": "http://evil.example"})) \
        == "forbidden_origin"


def test_its_own_names_and_originless_clients_are_served(server: dict[str, Any]) -> None:
    url = server["url"]
    port = url.rsplit(":", 1)[1]
    status, _, body = http(f"{url}/mcp", token=None, data=INIT, headers=MCP)  # an MCP client: no Origin
    assert status == 200 and b"serverInfo" in body
    status, _, body = http(f"{url}/mcp", token=None, data=INIT, headers={**MCP, "Host": f"localhost:{port}",
                                                                      "Origin": f"http://localhost:{port}"})
    assert status == 200 and b"serverInfo" in body
    assert http(f"{url}/", token=None)[0] == 200
    status, _, body = http(f"{url}/api/read?path={Path(server['docs']) / 'secret.md'}", token=None,
                           headers={"Host": f"localhost:{port}"})
    assert status == 200 and "launch code is 0000" in json.loads(body)["content"]  # what a rebound page would get
