"""Which Host and Origin a request to `minirag serve-http` may carry: the DNS-rebinding and cross-site guard.

A web page the user visits can point its own name at 127.0.0.1 (DNS rebinding) and then call
this server as if it were that page's own: its requests carry that name in `Host` and the
page's origin in `Origin`. A page on another site can also post a form here (cross-site
request forgery). So every request (/mcp, the page, /api/*, /login, /logout), with or
without MCP_AUTH_TOKEN, must name this server:

* `Host` (its name; any port, since a published port may differ from the one listened on):
  an IP address (a browser sends one only when it was asked for that address: there is no
  name to rebind), `localhost`, the listen address's own name, this machine's host name when
  listening on every interface (0.0.0.0, ::), or a name in MCP_ALLOWED_HOSTS (a reverse
  proxy's public name, a Compose service name).
* `Origin`, when there is one (browsers send it; curl and MCP clients do not): this very
  server as the request reached it (the same scheme, and the host and port of `Host`), or
  any origin whose host is in MCP_ALLOWED_HOSTS. `Origin: null` (sandboxed frames, file:
  pages) is refused.

Anything else gets 403 with a named error that says which header and what to set.
"""
from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

from appliance.adapters.status_page import SECURITY_HEADERS, named_error

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

WILDCARDS = ("0.0.0.0", "::", "")
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
MAX_ECHO_CHARS = 120
"""How much of a refused header the error repeats."""


def split_authority(authority: str) -> tuple[str, int | None]:
    """'Name:8080' / '[::1]:8080' / '::1' -> (lower-case host without brackets or trailing dot, port or None)."""
    text = authority.strip().lower()
    port: int | None = None
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, digits = text.partition(":")
        port = int(digits) if digits.isdigit() else None
    else:
        host = text
    return host.rstrip("."), port


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def server_names(listen_host: str, allowed: tuple[str, ...]) -> frozenset[str]:
    """The host names (besides IP addresses) this server answers to when it listens on `listen_host`."""
    names = {"localhost", *allowed}
    listen = listen_host.strip("[]").lower().rstrip(".")
    if listen in WILDCARDS:
        names.add(socket.gethostname().lower())
    elif not is_ip(listen):
        names.add(listen)
    return frozenset(names)


class HostGuard:
    """ASGI middleware: 403 for a request whose Host or Origin does not name this server (see the module)."""

    def __init__(self, app: ASGIApp, listen_host: str, allowed_hosts: tuple[str, ...] = ()) -> None:
        self.app = app
        self.allowed = frozenset(allowed_hosts)
        self.names = server_names(listen_host, allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await JSONResponse({"error": refusal}, status_code=403, headers=SECURITY_HEADERS)(scope, receive, send)

    def refusal(self, scope: Scope) -> dict[str, str | None] | None:
        """The named error for a request this guard refuses; None when it may pass."""
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())
                   if name in (b"host", b"origin")}
        host_header = headers.get("host")
        if host_header is not None:
            host, _ = split_authority(host_header)
            if not (is_ip(host) or host in self.names):
                return named_error(
                    "forbidden_host",
                    f"Host {host_header[:MAX_ECHO_CHARS]!r} is not a name of this server; refused so that a web "
                    "page cannot reach it by pointing its own name here (DNS rebinding)",
                    "Use its address (e.g. 127.0.0.1) or localhost, or add the name to MCP_ALLOWED_HOSTS "
                    "(e.g. a reverse proxy's public name).")
        origin = headers.get("origin")
        if origin is not None and not self._origin_ok(origin, host_header, scope.get("scheme", "http")):
            return named_error(
                "forbidden_origin",
                f"Origin {origin[:MAX_ECHO_CHARS]!r} is not this server's own; a page of another site may not "
                "call it (cross-site request)",
                "Open the page from this server itself, or add the page's host name to MCP_ALLOWED_HOSTS "
                "(e.g. a reverse proxy's public name).")
        return None

    def _origin_ok(self, origin: str, host_header: str | None, scheme: str) -> bool:
        try:
            parts = urlsplit(origin.strip())
            origin_port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
        except ValueError:
            return False
        origin_host = (parts.hostname or "").rstrip(".")
        if not origin_host or parts.scheme.lower() not in ("http", "https"):
            return False  # "null", file:, a malformed value
        if origin_host in self.allowed:
            return True
        if host_header is None:
            return False
        host, port = split_authority(host_header)
        return (parts.scheme.lower(), origin_host, origin_port) == (scheme, host, port or DEFAULT_PORTS.get(scheme))
