"""The MCP server over streamable HTTP (`minirag serve-http HOST:PORT`, the container's daemon mode).

The tools are the stdio server's (`appliance.adapters.mcp_server.create_server`); this module adds
the transport, the status page (`appliance.adapters.status_page`: GET / and /api/*) and a token check:

* a non-loopback address is refused unless MCP_AUTH_TOKEN is set (at least
  MIN_TOKEN_CHARS characters), and
* with a token, every HTTP request must carry `Authorization: Bearer <token>`
  (compared in constant time); anything else gets 401 before reaching MCP. The page
  and its JSON endpoints also take the session cookie that signing in on the page
  (POST /login with the token) sets; its sign-in form and its script and style sheet
  (no data in them) are open.

Before either, appliance.adapters.host_guard refuses (403) any request whose Host or Origin does not
name this server, token or not: a web page cannot reach a loopback server through DNS
rebinding, nor post to it from another site. A wrong bearer token counts against its
address (Throttle); only wrong tokens are then answered 429: the right one always passes.

The MCP endpoint is http://HOST:PORT/mcp, the page http://HOST:PORT/. Logs go to stderr.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.types import ASGIApp, Receive, Scope, Send

    from appliance.adapters.runtime import Runtime
    from appliance.adapters.status_page import Sessions, Throttle
    from appliance.config import Environment, Overrides

MCP_PATH = "/mcp"
MIN_TOKEN_CHARS = 16
UNAUTHORIZED = {"code": "unauthorized", "message": "Missing or wrong bearer token",
                "hint": "Send 'Authorization: Bearer <MCP_AUTH_TOKEN>', or sign in on the page at /."}


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


OPEN_PATHS = ("/login", "/logout")
OPEN_PREFIXES = ("/static/",)
"""The sign-in form, sign-out and the page's script and style sheet: reachable without the token."""
PAGE_PATHS = ("/",)
PAGE_PREFIXES = ("/api/",)
"""The page and its JSON endpoints: the bearer token or a signed-in session."""


class TokenGate:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>`; the status
    page and its endpoints also take a signed-in session's cookie (see appliance.adapters.status_page)."""

    def __init__(self, app: ASGIApp, token: str, sessions: Sessions | None = None,
                 throttle: Throttle | None = None) -> None:
        from appliance.adapters.status_page import Throttle

        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.sessions = sessions
        self.throttle = throttle or Throttle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        path = scope.get("path", "")
        page = path in PAGE_PATHS or path.startswith(PAGE_PREFIXES)
        if scope["type"] == "http" and (path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)):
            await self.app(scope, receive, send)  # /login throttles its own attempts
            return
        from appliance.adapters.status_page import client_address, too_many

        given = self._authorization(scope)
        if (given is not None and hmac.compare_digest(given, self.expected)) or (page and self._signed_in(scope)):
            await self.app(scope, receive, send)  # the right token passes, however many wrong ones came before
            return
        if given is not None:
            client = client_address(scope)
            wait = self.throttle.retry_after(client)
            self.throttle.failed(client)
            if wait > 0 and scope["type"] == "http":
                await too_many(wait)(scope, receive, send)
                return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if path in PAGE_PATHS:
            from appliance.adapters.status_page import login_page

            await login_page()(scope, receive, send)
            return
        body = json.dumps({"error": UNAUTHORIZED}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"www-authenticate", b'Bearer realm="minirag"'),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _authorization(scope: Scope) -> bytes | None:
        """The Authorization header's value; None when there is none (that is not a wrong token)."""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                return bytes(value)
        return None

    def _signed_in(self, scope: Scope) -> bool:
        from appliance.adapters.status_page import session_cookie

        return self.sessions is not None and self.sessions.valid(session_cookie(scope))


def build_app(runtime: Runtime, token: str, listen_host: str, allowed_hosts: tuple[str, ...] = ()) -> Starlette:
    """The Starlette app: the MCP tools at /mcp and the status page at /, behind HostGuard (for a server
    listening on `listen_host`, also answering to `allowed_hosts`) and TokenGate when a token is set."""
    from starlette.middleware import Middleware

    from appliance.adapters.host_guard import HostGuard
    from appliance.adapters.mcp_server import create_server
    from appliance.adapters.status_page import Sessions, Throttle, add_routes

    mcp = create_server(runtime)
    sessions, throttle = Sessions(), Throttle()
    add_routes(mcp, runtime, token, sessions, throttle)
    middleware = [Middleware(HostGuard, listen_host=listen_host, allowed_hosts=allowed_hosts)]
    if token:
        middleware.append(Middleware(TokenGate, token=token, sessions=sessions, throttle=throttle))
    return mcp.http_app(path=MCP_PATH, middleware=middleware, transport="http")


def serve_http(host: str, port: int, token: str, runtime: Runtime, allowed_hosts: tuple[str, ...] = ()) -> None:
    """Serve until SIGTERM/SIGINT. Raises AddressRefused before binding anything unsafe."""
    import uvicorn

    check_address(f"[{host}]:{port}" if ":" in host else f"{host}:{port}", token)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from appliance.adapters.host_guard import server_names

    app = build_app(runtime, token, host, allowed_hosts)
    runtime.warm_up()  # no handshake to keep quick here: load now, answer the first query warm, take syncs
    logging.getLogger("appliance.http").info("MCP over HTTP at http://%s:%d%s, status page at http://%s:%d/ "
                                             "(bearer token %s; Host names besides IP addresses: %s)", host, port,
                                             MCP_PATH, host, port, "required" if token else "off: loopback only",
                                             ", ".join(sorted(server_names(host, allowed_hosts))))
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                timeout_graceful_shutdown=2)
    from appliance.platform import stopping  # uvicorn handled SIGTERM; a sync_start job still runs: stop it

    stopping.exit_when_quiet("the HTTP server is stopping")


def main(address: str, environment: Environment, overrides: Overrides | None = None) -> int:
    """`minirag serve-http`: `environment` is what the CLI read at start, `overrides` its flags."""
    from appliance.adapters.runtime import Runtime
    from appliance.errors import ConfigError

    token = environment.mcp_auth_token
    try:
        host, port = check_address(address, token)
        allowed = environment.allowed_hosts()
    except (AddressRefused, ConfigError) as exc:
        hint = getattr(exc, "hint", None)
        sys.stderr.write(f"error: {exc}\n" + (f"hint: {hint}\n" if hint else ""))
        return 2
    serve_http(host, port, token, Runtime(environment, overrides), allowed)
    return 0
