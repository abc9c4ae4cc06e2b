"""The status and search page of `minirag serve-http` (daemon mode): GET / and its JSON endpoints.

One small page (appliance/static/: HTML, one script, one style sheet; nothing loaded from
elsewhere, the Content-Security-Policy forbids it) shows the index's health, the running
sync's progress, the last syncs with their failures, the scheduler's next run, and a search
box whose hits open their document. Its data comes from these endpoints:

    GET /api/status                  Appliance.status() plus this server's recent sync jobs
    GET /api/sync                    its sync part alone (cheap: polled while a sync runs)
    GET /api/search?q=...&k=10       Appliance.search(): hits, each with its citation
    GET /api/read?path=...|source=...&offset=0&revision=...
                                     Appliance.read(): one page of a document

A failure is `{"error": {code, message, hint}}` with a 4xx/5xx status, as the MCP tools
report it; calls into the Appliance run in worker threads, bounded by CALL_TIMEOUT_S.

Authentication (with MCP_AUTH_TOKEN set; http_server.TokenGate enforces it): `/` and
`/api/*` take the same bearer token as `/mcp`, or a session cookie. POST /login with the
token (compared in constant time) opens a session: a random id kept only in this process's
memory (Sessions), sent back as an HttpOnly, SameSite=Strict cookie. The token itself never
reaches the page's script or the browser's storage, so a script that got into the page
could not read it out; SameSite=Strict keeps other sites' pages from using the session;
a restart of the server ends every session (sign in again). Sign-out is a POST that
appliance.adapters.host_guard lets through only from this server's own page (its Origin), like every
other request.
"""
from __future__ import annotations

import hashlib
import hmac
import html
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from importlib import resources
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qs

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from appliance.assemble.citations import hit_place
from appliance.assemble.paging import READ_PAGE_CHARS
from appliance.assemble.quoting import label
from appliance.errors import ApplianceError, InvalidArgument
from appliance.results import Passage, Status, SyncActivity

if TYPE_CHECKING:
    from starlette.types import Scope

    from appliance.adapters.runtime import Runtime

Handler = Callable[[Request], Awaitable[Response]]

log = logging.getLogger("appliance.http")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")
"""Only this server's own script, style sheet and endpoints: nothing external, nothing inline."""
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
"""same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with the page's own
sign-out form, which appliance.adapters.host_guard refuses; other sites still get no referrer."""
STATIC = {"page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}
"""The page's assets under /static/ (no data in them: served without the token)."""
MAX_TOP_K = 100
"""As the MCP query_documents tool: topK from 1 to 100."""
CALL_TIMEOUT_S = 120.0
"""A call into the Appliance that takes longer is answered with a `timeout` error (the thread finishes alone)."""
MAX_LOGIN_BYTES = 8192
SESSION_TTL_S = 12 * 3600.0
MAX_SESSIONS = 256
"""Sessions kept at once; the oldest goes first."""
MAX_FAILURES = 10
FAILURE_WINDOW_S = 60.0
"""Wrong tokens (sign-in or bearer) one address may send per window before it is answered 429."""
MAX_TRACKED_CLIENTS = 4096
STATUS_FOR_CODE = {"invalid_argument": 400, "path_outside_roots": 400, "unauthorized": 401, "not_found": 404,
                   "sync_busy": 409, "payload_too_large": 413, "internal_error": 500, "timeout": 504}
"""HTTP status of an error code; any other ApplianceError (index, model, configuration) is 503."""


class Sessions:
    """The page's sign-ins: random ids held in memory, each valid for SESSION_TTL_S.

    Only a hash of each id is kept and looked up, so neither a memory dump nor the
    lookup's timing tells a valid id."""

    def __init__(self, ttl: float = SESSION_TTL_S, limit: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.limit, self.clock = ttl, limit, clock
        self._expiry: dict[str, float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(session_id: str) -> str:
        return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()

    def open(self) -> str:
        session_id = secrets.token_urlsafe(32)
        with self._lock:
            now = self.clock()
            self._expiry = {k: t for k, t in self._expiry.items() if t > now}
            while len(self._expiry) >= self.limit:
                del self._expiry[min(self._expiry, key=self._expiry.__getitem__)]
            self._expiry[self._key(session_id)] = now + self.ttl
        return session_id

    def valid(self, session_id: str | None) -> bool:
        if not session_id:
            return False
        with self._lock:
            expiry = self._expiry.get(self._key(session_id))
        return expiry is not None and expiry > self.clock()

    def close(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._expiry.pop(self._key(session_id), None)


class Throttle:
    """Failed sign-ins and wrong bearer tokens per client address: past MAX_FAILURES within
    FAILURE_WINDOW_S, that address's wrong tokens are answered 429 (with Retry-After) until its
    oldest failure is out of the window. The right token is never held back: every client behind
    one address (a NAT, `docker -p 127.0.0.1:…`) would otherwise be locked out by one that
    guesses. A token of MIN_TOKEN_CHARS can't be guessed anyway; this keeps a guessing client
    from filling the log and tells it to slow down."""

    def __init__(self, limit: int = MAX_FAILURES, window: float = FAILURE_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> float:
        """Seconds until `client` may try again; 0 when it may now."""
        with self._lock:
            recent = self._recent(client)
            return recent[0] + self.window - self.clock() if len(recent) >= self.limit else 0.0

    def failed(self, client: str) -> None:
        with self._lock:
            recent = self._recent(client)
            recent.append(self.clock())
            self._failures[client] = recent[-self.limit:]
            if len(self._failures) > MAX_TRACKED_CLIENTS:  # forget the client whose last failure is oldest
                del self._failures[min(self._failures, key=lambda c: self._failures[c][-1])]

    def _recent(self, client: str) -> list[float]:
        since = self.clock() - self.window
        return [t for t in self._failures.get(client, ()) if t > since]


def client_address(scope: Scope) -> str:
    client = scope.get("client") or ("unknown", 0)
    return str(client[0])


def too_many(retry_after: float, *, form: bool = False) -> Response:
    """429 for a throttled address: the sign-in form with the message, or a named JSON error."""
    seconds = max(1, int(retry_after + 0.999))
    error = named_error("too_many_attempts", f"Too many wrong tokens from this address; try again in {seconds} s",
                        "Check MCP_AUTH_TOKEN: the server was started with a different one.")
    response = login_page(f"too_many_attempts: {error['message']}.", status=429) if form else \
        JSONResponse({"error": error}, status_code=429, headers=SECURITY_HEADERS)
    response.headers["Retry-After"] = str(seconds)
    return response


def cookie_name(scope: Scope) -> str:
    """The session cookie's name: per port, since browsers share cookies between a host's ports."""
    server = scope.get("server") or (None, None)
    return f"minirag_session_{server[1] or 0}"


def session_cookie(scope: Scope) -> str | None:
    """The session id the request's Cookie header carries, or None."""
    name = cookie_name(scope)
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())
    for key, value in headers:
        if key != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            k, sep, v = part.strip().partition("=")
            if sep and k == name:
                return v.strip()
    return None


def _asset(name: str) -> bytes:
    return (resources.files("appliance") / "static" / name).read_bytes()


def named_error(code: str, message: str, hint: str | None = None) -> dict[str, str | None]:
    return {"code": code, "message": message, "hint": hint}


def error_response(error: dict[str, str | None]) -> JSONResponse:
    """`{"error": {code, message, hint}}` with the status its code maps to."""
    status = STATUS_FOR_CODE.get(error.get("code") or "", 503)
    headers = dict(SECURITY_HEADERS)
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="minirag"'
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def login_page(error: str | None = None, status: int = 401) -> Response:
    """The sign-in form, with `error` (escaped) above it when there is one."""
    text = _asset("login.html").decode("utf-8")
    note = f'<p id="login-error" class="error" role="alert">{html.escape(error)}</p>' if error else ""
    return Response(text.replace("<!--error-->", note), status_code=status, media_type="text/html",
                    headers=SECURITY_HEADERS)


def _query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise InvalidArgument(f"{name} must be an integer from {low} to {high}, not {raw[:40]!r}")
    return value


async def _answer(work: Callable[[], object]) -> JSONResponse:
    """Run `work` in a worker thread; its dict as JSON, or its failure as a named error."""
    try:
        with anyio.fail_after(CALL_TIMEOUT_S):
            data = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except ApplianceError as exc:
        return error_response(exc.to_dict())
    except TimeoutError:
        return error_response(named_error("timeout", f"The server did not answer within {CALL_TIMEOUT_S:.0f} s",
                                         "The machine may be busy (a large sync); try again in a minute."))
    except Exception:
        log.exception("status page call failed")
        return error_response(named_error("internal_error",
                                         "The server hit an unexpected error; nothing about it is exposed here",
                                         "The server log (stderr) has the traceback."))
    return JSONResponse(data, headers=SECURITY_HEADERS)


def _status(runtime: Runtime, sign_in: bool) -> dict[str, object]:
    """Appliance.status() (or the configuration error) with this server's recent jobs."""
    status = runtime.status()
    out = status.wire()
    if isinstance(status, Status):
        out["recentJobs"] = _activity(runtime).wire()["jobs"]
    return out | {"signInRequired": sign_in, "now": time.time()}


def _sync(runtime: Runtime) -> dict[str, object]:
    """The sync part of the status alone, from the index's small state files (no LanceDB, no walk
    of the roots): what the page polls every 2.5 s, so a short sync shows too."""
    from appliance.sync.state import read_scheduler_state

    app = runtime.appliance()
    sync = _activity(runtime).wire()
    return {"syncRunning": sync["running"], "lastSync": sync["lastSync"], "recentJobs": sync["jobs"],
            "scheduler": read_scheduler_state(app.settings.db_path), "now": time.time()}


def _activity(runtime: Runtime) -> SyncActivity:
    activity = runtime.appliance().sync_status()
    assert isinstance(activity, SyncActivity)  # no job id: the index's activity
    return activity


def _search(runtime: Runtime, query: str, top_k: int) -> dict[str, object]:
    if not query.strip():
        raise InvalidArgument("The query is empty", hint="Ask with a few words or an exact identifier.")
    answer = runtime.appliance().search(query, top_k=top_k, sections="none")
    data = answer.wire()
    data.pop("parents", None)  # the page shows the passages; a document opens whole
    hits: list[object] = [hit.wire() | {"citation": f"{label(hit.display_path)}{hit_place(hit)}",
                                           "text": page_passage(hit)} for hit in answer.results]
    return data | {"results": hits}


def page_passage(hit: Passage) -> str:
    """A hit's text as the page shows it under its heading: without the heading-path line that
    starts the chunk's text for the model (the page prints the heading above it already)."""
    heading, text = hit.heading, hit.text
    if heading and text.startswith(heading + "\n"):
        return text[len(heading) + 1:]
    return text


def _read(runtime: Runtime, params: dict[str, str], offset: int) -> dict[str, object]:
    path, source = params.get("path") or None, params.get("source") or None
    if path is not None and source is None:
        target, is_source = path, False
    elif source is not None and path is None:
        target, is_source = source, True
    else:
        raise InvalidArgument("Give exactly one of path or source", hint="Open a document from a search hit.")
    return runtime.appliance().read(target, is_source, require_absolute=True, offset=offset,
                                    max_chars=READ_PAGE_CHARS, revision=params.get("revision") or None).wire()


class Routes(Protocol):
    """What add_routes needs of the FastMCP server (fastmcp itself stays server.py's import)."""

    def custom_route(self, path: str, methods: list[str], name: str | None = None,
                     include_in_schema: bool = True) -> Callable[[Handler], Handler]: ...


def add_routes(mcp: Routes, runtime: Runtime, token: str, sessions: Sessions, throttle: Throttle) -> None:
    """The page, its assets, sign-in and sign-out, and the JSON endpoints, as custom routes of `mcp`
    (the FastMCP server whose HTTP app serves them)."""
    assets = {name: _asset(name) for name in (*STATIC, "index.html", "login.html")}

    @mcp.custom_route("/", methods=["GET"], include_in_schema=False)
    async def page(request: Request) -> Response:  # reached only when signed in (or no token is set)
        return Response(assets["index.html"], media_type="text/html", headers=SECURITY_HEADERS)

    @mcp.custom_route("/static/{name}", methods=["GET"], include_in_schema=False)
    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return Response("Not Found", status_code=404, media_type="text/plain", headers=SECURITY_HEADERS)
        return Response(assets[name], media_type=STATIC[name],
                        headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})

    @mcp.custom_route("/login", methods=["GET", "POST"], include_in_schema=False)
    async def login(request: Request) -> Response:
        if not token:
            return RedirectResponse("/", status_code=303)
        if request.method == "GET":
            return login_page(status=200)
        body = b""
        async for piece in request.stream():
            body += piece
            if len(body) > MAX_LOGIN_BYTES:
                return login_page("payload_too_large: the sign-in form carried more than a token", status=413)
        given = (parse_qs(body.decode("utf-8", "replace")).get("token") or [""])[0].strip()
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode()):
            client = client_address(request.scope)
            wait = throttle.retry_after(client)
            throttle.failed(client)
            if wait > 0:
                return too_many(wait, form=True)
            return login_page("unauthorized: wrong token. Enter the MCP_AUTH_TOKEN this server was started with.")
        response = RedirectResponse("/", status_code=303, headers=SECURITY_HEADERS)
        response.set_cookie(cookie_name(request.scope), sessions.open(), max_age=int(SESSION_TTL_S), path="/",
                            httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    @mcp.custom_route("/logout", methods=["POST"], include_in_schema=False)
    async def logout(request: Request) -> Response:
        sessions.close(session_cookie(request.scope))
        response = RedirectResponse("/", status_code=303, headers=SECURITY_HEADERS)
        response.delete_cookie(cookie_name(request.scope), path="/", httponly=True, samesite="strict")
        return response

    @mcp.custom_route("/api/status", methods=["GET"], include_in_schema=False)
    async def api_status(request: Request) -> Response:
        return await _answer(partial(_status, runtime, bool(token)))

    @mcp.custom_route("/api/sync", methods=["GET"], include_in_schema=False)
    async def api_sync(request: Request) -> Response:
        return await _answer(partial(_sync, runtime))

    @mcp.custom_route("/api/search", methods=["GET"], include_in_schema=False)
    async def api_search(request: Request) -> Response:
        try:
            top_k = _query_int(request, "k", 10, 1, MAX_TOP_K)
        except InvalidArgument as exc:
            return error_response(exc.to_dict())
        return await _answer(partial(_search, runtime, request.query_params.get("q", ""), top_k))

    @mcp.custom_route("/api/read", methods=["GET"], include_in_schema=False)
    async def api_read(request: Request) -> Response:
        try:
            offset = _query_int(request, "offset", 0, 0, 2**53)
        except InvalidArgument as exc:
            return error_response(exc.to_dict())
        return await _answer(partial(_read, runtime, dict(request.query_params), offset))

    @mcp.custom_route("/api/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"], include_in_schema=False)
    async def api_unknown(request: Request) -> Response:
        return error_response(named_error("not_found", f"No endpoint {request.url.path}",
                                         "The page's endpoints are /api/status, /api/sync, /api/search and /api/read."))
