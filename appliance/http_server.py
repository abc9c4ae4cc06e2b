"""The MCP server over streamable HTTP (`minirag serve-http HOST:PORT`, the container's daemon mode).

The tools are the stdio server's (`appliance.server.create_server`); this module adds
only the transport and a bearer-token check:

* a non-loopback address is refused unless MCP_AUTH_TOKEN is set (at least
  MIN_TOKEN_CHARS characters), and
* with a token, every HTTP request must carry `Authorization: Bearer <token>`
  (compared in constant time); anything else gets 401 before reaching MCP.

The endpoint is http://HOST:PORT/mcp. Logs go to stderr.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from appliance.config import Environment
    from appliance.runtime import Runtime

MCP_PATH = "/mcp"
MIN_TOKEN_CHARS = 16


class AddressRefused(ValueError):
    """The address cannot be served with the given token."""


def parse_address(address: str) -> tuple[str, int]:
    """'HOST:PORT', '[::1]:PORT' or ':PORT' (all interfaces) -> (host, port)."""
    raw = (address or "").strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise AddressRefused(f"MCP HTTP address must look like HOST:PORT (e.g. 127.0.0.1:8080), not {address!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(address: str, token: str) -> tuple[str, int]:
    """The (host, port) to bind; AddressRefused for a non-loopback address without a usable token."""
    host, port = parse_address(address)
    if token and len(token) < MIN_TOKEN_CHARS:
        raise AddressRefused(f"MCP_AUTH_TOKEN is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
                             "(e.g. `openssl rand -hex 32`)")
    if not is_loopback(host) and not token:
        raise AddressRefused(f"refusing to serve MCP on {host}:{port} (not a loopback address) without "
                             "MCP_AUTH_TOKEN; set MCP_AUTH_TOKEN to a secret that clients send as "
                             "'Authorization: Bearer <token>', or bind 127.0.0.1")
    return host, port


class BearerAuth:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                given = value
                break
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": {"code": "unauthorized",
                                     "message": "Missing or wrong bearer token",
                                     "hint": "Send 'Authorization: Bearer <MCP_AUTH_TOKEN>'."}}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"www-authenticate", b'Bearer realm="minirag"'),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def build_app(runtime: Runtime, token: str) -> Any:
    """The Starlette app: the MCP tools at /mcp, behind BearerAuth when a token is set."""
    from starlette.middleware import Middleware

    from appliance.server import create_server

    mcp = create_server(runtime)
    middleware = [Middleware(BearerAuth, token=token)] if token else []
    return mcp.http_app(path=MCP_PATH, middleware=middleware, transport="http")


def serve_http(host: str, port: int, token: str, runtime: Runtime) -> None:
    """Serve until SIGTERM/SIGINT. Raises AddressRefused before binding anything unsafe."""
    import uvicorn

    check_address(f"[{host}]:{port}" if ":" in host else f"{host}:{port}", token)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = build_app(runtime, token)
    logging.getLogger("appliance.http").info("MCP over HTTP at http://%s:%d%s (bearer token %s)", host, port,
                                             MCP_PATH, "required" if token else "off: loopback only")
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                timeout_graceful_shutdown=2)
    from appliance import stopping  # uvicorn handled SIGTERM; a sync_start job still runs: stop it

    stopping.exit_when_quiet("the HTTP server is stopping")


def main(address: str, environment: Environment, overrides: dict[str, Any] | None = None) -> int:
    """`minirag serve-http`: `environment` is what the CLI read at start, `overrides` its flags."""
    from appliance.runtime import Runtime

    token = environment.mcp_auth_token
    try:
        host, port = check_address(address, token)
    except AddressRefused as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    serve_http(host, port, token, Runtime(environment, overrides))
    return 0
