"""Who gets through http_server.TokenGate, and the status page's sign-in sessions (no model, no server)."""
from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from appliance.adapters.http_server import TokenGate
from appliance.adapters.status_page import Sessions

TOKEN = "unit-test-token-0123456789"


async def _ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"through"})


@pytest.fixture
def gated() -> tuple[TestClient, Sessions]:
    sessions = Sessions()
    return TestClient(TokenGate(_ok, TOKEN, sessions), base_url="http://127.0.0.1:8080"), sessions


def test_the_bearer_token_opens_everything(gated: tuple[TestClient, Sessions]) -> None:
    client, _ = gated
    for path in ("/mcp", "/", "/api/status", "/anything"):
        assert client.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).text == "through"
        for wrong in ({}, {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": TOKEN}):
            assert client.get(path, headers=wrong).status_code == 401


def test_a_session_opens_the_page_and_its_api_only(gated: tuple[TestClient, Sessions]) -> None:
    client, sessions = gated
    cookie = {"Cookie": f"minirag_session_8080={sessions.open()}"}
    assert client.get("/", headers=cookie).status_code == 200
    assert client.get("/api/search?q=x", headers=cookie).status_code == 200
    assert client.post("/mcp", headers=cookie).status_code == 401
    assert client.get("/", headers={"Cookie": "minirag_session_8080=forged"}).status_code == 401
    assert client.get("/", headers={"Cookie": cookie["Cookie"].replace("8080", "9090")}).status_code == 401


def test_unauthorized_answers_are_named(gated: tuple[TestClient, Sessions]) -> None:
    client, _ = gated
    page = client.get("/")
    assert page.status_code == 401 and 'id="login-form"' in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    api = client.get("/api/status")
    assert api.status_code == 401 and api.json()["error"]["code"] == "unauthorized"
    assert api.headers["www-authenticate"].startswith("Bearer")
    for path in ("/login", "/static/page.js", "/static/page.css"):  # the form and its assets: no data
        assert client.get(path).status_code == 200


def test_sessions_expire_are_bounded_and_close() -> None:
    now = [1000.0]
    sessions = Sessions(ttl=60, limit=3, clock=lambda: now[0])
    first = sessions.open()
    assert sessions.valid(first) and not sessions.valid("") and not sessions.valid(None)
    now[0] += 61
    assert not sessions.valid(first)
    ids = [sessions.open() for _ in range(4)]
    assert not sessions.valid(ids[0]) and all(sessions.valid(i) for i in ids[1:])
    sessions.close(ids[1])
    assert not sessions.valid(ids[1])


def test_wrong_tokens_are_throttled_but_the_right_one_always_passes() -> None:
    from appliance.adapters.status_page import Throttle

    now = [1000.0]
    throttle = Throttle(limit=3, window=60, clock=lambda: now[0])
    client = TestClient(TokenGate(_ok, TOKEN, Sessions(), throttle), base_url="http://127.0.0.1:8080")
    right, wrong = {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": "Bearer guess"}
    assert client.get("/mcp").status_code == 401  # no token at all is not a guess
    for _ in range(3):
        assert client.get("/mcp", headers=wrong).status_code == 401
    refused = client.get("/mcp", headers=wrong)  # one more guess from this address waits out the window
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_attempts"
    assert refused.headers["retry-after"] == "60"
    for path in ("/mcp", "/api/status", "/"):  # another client behind the same address, with the right token
        assert client.get(path, headers=right).text == "through"
    now[0] += 30
    assert client.get("/api/status", headers=wrong).headers["retry-after"] == "30"  # guessing keeps the window
    assert client.get("/mcp").status_code == 401  # and a request without a token is told to send one
    now[0] += 61
    assert client.get("/mcp", headers=wrong).status_code == 401  # the window passed: a plain 401 again
    assert client.get("/mcp", headers=right).text == "through"


def test_the_throttle_forgets_the_stalest_address_first() -> None:
    from appliance.adapters import status_page
    from appliance.adapters.status_page import Throttle

    now = [0.0]
    throttle = Throttle(limit=1, window=60, clock=lambda: now[0])
    for i in range(status_page.MAX_TRACKED_CLIENTS + 1):
        now[0] += 0.001
        throttle.failed(f"10.0.{i // 256}.{i % 256}")
    assert throttle.retry_after("10.0.0.0") == 0  # the first, forgotten
    assert throttle.retry_after(f"10.0.{status_page.MAX_TRACKED_CLIENTS // 256}.0") > 0


def test_the_sign_in_form_is_throttled_with_a_named_page_and_still_takes_the_right_token() -> None:
    from fastmcp import FastMCP

    from appliance.adapters.status_page import Throttle, add_routes

    mcp = FastMCP("sign-in")
    throttle = Throttle(limit=2, window=60)
    add_routes(mcp, None, TOKEN, Sessions(), throttle)  # type: ignore[arg-type]  # /login needs no runtime
    client = TestClient(mcp.http_app(path="/mcp", transport="http"), base_url="http://127.0.0.1:8080")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for _ in range(2):
        assert client.post("/login", content=b"token=guess", headers=form).status_code == 401
    page = client.post("/login", content=b"token=guess", headers=form, follow_redirects=False)
    assert page.status_code == 429 and "too_many_attempts" in page.text and 'id="login-form"' in page.text
    assert 0 < int(page.headers["retry-after"]) <= 60
    signed_in = client.post("/login", content=f"token={TOKEN}".encode(), headers=form, follow_redirects=False)
    assert signed_in.status_code == 303 and "minirag_session_8080=" in signed_in.headers["set-cookie"]
