"""DNS rebinding and cross-site requests: the whole `serve-http` app in-process (appliance.adapters.host_guard),
with and without a token. Nothing here loads the model or opens the index: every request either is
refused before it reaches a tool, or needs neither (the MCP handshake, the page, an unknown /api path)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from appliance.adapters.host_guard import HostGuard, split_authority
from appliance.adapters.http_server import build_app
from appliance.adapters.runtime import Runtime
from appliance.config import read_environment
from appliance.errors import ConfigError

TOKEN = "host-guard-token-0123456789"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def app_client(tmp_path: Path, token: str = "", listen: str = "127.0.0.1", allowed: str = "") -> TestClient:
    env = read_environment({"BASE_DIR": str(tmp_path), "DB_PATH": str(tmp_path / "index"),
                            "MCP_ALLOWED_HOSTS": allowed})
    app = build_app(Runtime(env), token, listen, env.allowed_hosts())
    return TestClient(app, base_url="http://127.0.0.1:8080")


@pytest.fixture
def tokenless(tmp_path: Path) -> Iterator[TestClient]:
    with app_client(tmp_path) as client:
        yield client


def refused(response: Any, code: str) -> str:
    assert response.status_code == 403, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["code"] == code and error["hint"]
    return str(error["message"])


def test_a_tokenless_loopback_server_refuses_a_foreign_host_on_every_endpoint(tokenless: TestClient) -> None:
    foreign = {"Host": "attacker.example:8080"}
    for method, path in (("GET", "/"), ("GET", "/api/status"), ("GET", "/api/read?path=/etc/passwd"),
                         ("GET", "/api/search?q=x"), ("GET", "/static/page.js"), ("POST", "/logout"),
                         ("GET", "/login"), ("GET", "/anything")):
        message = refused(tokenless.request(method, path, headers=foreign), "forbidden_host")
        assert "'attacker.example:8080'" in message and "DNS rebinding" in message
    message = refused(tokenless.post("/mcp", json=INIT, headers={**MCP_HEADERS, **foreign}), "forbidden_host")
    assert "attacker.example" in message


def test_a_foreign_origin_is_refused_even_with_a_good_host(tokenless: TestClient) -> None:
    for origin in ("http://attacker.example", "http://attacker.example:8080", "null", "file://",
                   "http://127.0.0.1:3000", "http://localhost:8080", "https://127.0.0.1:8080", "garbage"):
        refused(tokenless.post("/mcp", json=INIT, headers={**MCP_HEADERS, "Origin": origin}), "forbidden_origin")
        refused(tokenless.get("/api/status", headers={"Origin": origin}), "forbidden_origin")
    refused(tokenless.post("/logout", headers={"Origin": "http://attacker.example"}), "forbidden_origin")


def test_this_servers_own_names_pass(tokenless: TestClient) -> None:
    for host in ("127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "127.0.0.1:9999", "localhost."):
        assert tokenless.get("/api/nope", headers={"Host": host}).status_code == 404  # reached the app
    assert tokenless.get("/static/page.js").status_code == 200
    same = tokenless.post("/logout", headers={"Origin": "http://127.0.0.1:8080"}, follow_redirects=False)
    assert same.status_code == 303  # the page's own sign-out form
    hello = tokenless.post("/mcp", json=INIT, headers={**MCP_HEADERS, "Origin": "http://127.0.0.1:8080"})
    assert hello.status_code == 200 and "serverInfo" in hello.text
    assert tokenless.post("/mcp", json=INIT, headers=MCP_HEADERS).status_code == 200  # no Origin: an MCP client


def test_the_allow_list_admits_a_reverse_proxys_name_as_host_and_origin(tmp_path: Path) -> None:
    with app_client(tmp_path, token=TOKEN, listen="0.0.0.0", allowed="docs.example.com, minirag") as client:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        proxied = {**bearer, "Host": "docs.example.com", "Origin": "https://docs.example.com"}
        assert client.get("/api/nope", headers=proxied).status_code == 404
        assert client.get("/api/nope", headers={**bearer, "Host": "minirag:8080"}).status_code == 404
        assert client.get("/api/nope", headers={**bearer, "Host": "10.1.2.3:8080"}).status_code == 404  # an address
        # with a token, a foreign Host is refused before the token is even looked at
        refused(client.get("/api/status", headers={**bearer, "Host": "evil.example"}), "forbidden_host")
        refused(client.get("/api/status", headers={"Host": "evil.example"}), "forbidden_host")
        refused(client.get("/api/status", headers={**bearer, "Origin": "https://evil.example"}), "forbidden_origin")


def test_a_wildcard_address_answers_to_this_machines_name_only_among_names() -> None:
    import socket

    guard = HostGuard(lambda *a: None, "0.0.0.0")  # type: ignore[arg-type,return-value]
    ok = {"type": "http", "headers": [(b"host", f"{socket.gethostname()}:8080".encode())]}
    assert guard.refusal(ok) is None
    assert guard.refusal({"type": "http", "headers": [(b"host", b"192.168.0.7")]}) is None
    assert guard.refusal({"type": "http", "headers": [(b"host", b"intranet.example")]}) is not None
    named = HostGuard(lambda *a: None, "docs.internal")  # type: ignore[arg-type,return-value]
    assert named.refusal({"type": "http", "headers": [(b"host", b"docs.internal:8080")]}) is None


def test_authorities_split_like_browsers_send_them() -> None:
    assert split_authority("[::1]:8080") == ("::1", 8080)
    assert split_authority("Example.COM.:443") == ("example.com", 443)
    assert split_authority("localhost") == ("localhost", None)
    assert split_authority("::1") == ("::1", None)


def test_a_bad_allow_list_is_named() -> None:
    assert read_environment({"MCP_ALLOWED_HOSTS": " A.example.com ,, b_c "}).allowed_hosts() == ("a.example.com",
                                                                                                  "b_c")
    for bad in ("https://docs.example.com", "docs.example.com:443", "*", "docs example"):
        with pytest.raises(ConfigError, match="MCP_ALLOWED_HOSTS"):
            read_environment({"MCP_ALLOWED_HOSTS": bad}).allowed_hosts()


def test_serve_http_refuses_to_start_with_a_bad_allow_list(capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.adapters.http_server import main

    assert main("127.0.0.1:8080", read_environment({"MCP_ALLOWED_HOSTS": "https://docs.example.com/"})) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: MCP_ALLOWED_HOSTS: 'https://docs.example.com/' is not a host name")
    assert "hint: List bare names" in err
