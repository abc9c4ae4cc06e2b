"""Security regression set: path escapes at every entry point that takes a path, SSRF at ingest_url.

Path escapes: each attempt (`ATTEMPTS`, one named pytest.param per attempt) is tried
against every service method and every MCP tool that takes a path, and must be refused
with the expected error code; an escape to an existing file outside the roots must be
`path_outside_roots` with the path in the message, and nothing outside a root may be read
or indexed. Look-alike spellings (U+2215, fullwidth dots, combining marks, %2e, backslashes)
must stay what they are: a name inside the root that does not exist.

SSRF: the fetcher's own tables (tests/fixtures/http_fakes.py; tests/unit/test_fetch_ssrf.py
runs them against `fetch_url`) go through `Appliance.ingest_url` and the MCP `ingest_url`
tool with URL ingestion switched on, plus redirects and DNS rebinding against loopback
servers. Every refusal names the host and the reason.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastmcp import Client

from appliance.adapters.mcp_server import Runtime, create_server
from appliance.config import load_settings, read_environment
from appliance.errors import ApplianceError
from appliance.ingest import fetch
from appliance.service import Appliance
from tests.fixtures.http_fakes import (
    BAD_URLS,
    PRIVATE_IP,
    PUBLIC_IP,
    REFUSED,
    FakeResolver,
    page,
    redirect,
    refused_names_resolver,
)

pytestmark = pytest.mark.faults

SECRET = "TOPSECRET_PAYLOAD_9931"
OUTSIDE, NOT_FOUND, INVALID = "path_outside_roots", "not_found", "invalid_argument"


# ------------------------------------------------------------------ the layout under attack

@dataclass(frozen=True)
class Layout:
    base: Path
    docs: Path
    """The only document root."""
    outside: Path
    evil: Path
    """`<docs>-evil`: a sibling whose name starts with the root's."""
    fd: int
    """An open descriptor of outside/secret.md (for /proc/self/fd and /dev/fd)."""


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    base = tmp_path_factory.mktemp("escape").resolve()
    docs, outside, evil = base / "docs", base / "outside", base / "docs-evil"
    for folder in (docs / "sub", outside, evil):
        folder.mkdir(parents=True)
    (docs / "a.md").write_text("# Alpha\n\nInside document alpha, about calibration.\n", "utf-8")
    (docs / "sub" / "b.md").write_text("# Beta\n\nInside document beta.\n", "utf-8")
    for where in (outside, evil):
        (where / "secret.md").write_text(f"# Secret\n\n{SECRET} lives outside the root.\n", "utf-8")
    (outside / ".bashrc").write_text(f"{SECRET}\n", "utf-8")
    links = {
        "link-out.md": outside / "secret.md",              # file link, absolute target
        "sub/rel-out.md": Path("../../outside/secret.md"),  # file link, relative target
        "linkdir": outside,                                 # directory link out
        "evil-link": evil,                                  # link to the root's prefix-sibling
        "chain1.md": docs / "chain2.md",                    # inside link -> escaping link
        "chain2.md": outside / "secret.md",
        "dangling.md": outside / "missing.md",              # points outside at nothing
        "loopA": docs / "loopB",                            # a symlink loop
        "loopB": docs / "loopA",
        "inner-link.md": docs / "a.md",                     # a legitimate link inside the root
    }
    for name, target in links.items():
        (docs / name).symlink_to(target)
    fd = os.open(outside / "secret.md", os.O_RDONLY)
    yield Layout(base, docs, outside, evil, fd)
    os.close(fd)


@dataclass(frozen=True)
class Attempt:
    path: Callable[[Layout], str]
    service: str
    """The error code the service (CLI semantics: relative paths from the working directory) answers."""
    mcp: str | dict[str, str] | None = None
    """The MCP tools' code when it differs (they require absolute paths); a dict: per tool, else INVALID."""

    def mcp_code(self, tool: str) -> str:
        if isinstance(self.mcp, dict):
            return self.mcp.get(tool, INVALID)
        return self.mcp or self.service


A = Attempt
ATTEMPTS: dict[str, Attempt] = {
    # .. traversal
    "dotdot": A(lambda L: f"{L.docs}/../outside/secret.md", OUTSIDE),
    "dotdot-from-subdir": A(lambda L: f"{L.docs}/sub/../../outside/secret.md", OUTSIDE),
    "dotdot-past-filesystem-root": A(lambda L: f"{L.docs}/" + "../" * 40 + "etc/passwd", OUTSIDE),
    "dot-segments": A(lambda L: f"{L.docs}/./sub/./../../outside/./secret.md", OUTSIDE),
    "root-parent": A(lambda L: f"{L.docs}/..", OUTSIDE),
    "double-slash-inner": A(lambda L: f"{L.docs}//..//outside//secret.md", OUTSIDE),
    # absolute paths outside every root
    "absolute-outside": A(lambda L: f"{L.outside}/secret.md", OUTSIDE),
    "absolute-etc-passwd": A(lambda L: "/etc/passwd", OUTSIDE),
    "double-slash-prefix": A(lambda L: f"/{L.outside}/secret.md", OUTSIDE),
    "trailing-slash-file": A(lambda L: f"{L.outside}/secret.md/", OUTSIDE),
    "trailing-slash-dir": A(lambda L: f"{L.outside}/", OUTSIDE),
    # /docs vs /docs-evil
    "prefix-sibling": A(lambda L: f"{L.docs}-evil/secret.md", OUTSIDE),
    "prefix-sibling-via-dotdot": A(lambda L: f"{L.docs}/../docs-evil/secret.md", OUTSIDE),
    # symbolic links
    "symlink-file-absolute-target": A(lambda L: f"{L.docs}/link-out.md", OUTSIDE),
    "symlink-file-relative-target": A(lambda L: f"{L.docs}/sub/rel-out.md", OUTSIDE),
    "symlink-dir-escape": A(lambda L: f"{L.docs}/linkdir/secret.md", OUTSIDE),
    "symlink-dir-itself": A(lambda L: f"{L.docs}/linkdir", OUTSIDE),
    "symlink-to-prefix-sibling": A(lambda L: f"{L.docs}/evil-link/secret.md", OUTSIDE),
    "symlink-chain": A(lambda L: f"{L.docs}/chain1.md", OUTSIDE),
    "symlink-dangling-outside": A(lambda L: f"{L.docs}/dangling.md", OUTSIDE),
    "symlink-loop": A(lambda L: f"{L.docs}/loopA/a.md", INVALID),
    # case tricks (the file system is case-sensitive: DOCS is another directory)
    "case-variant-root": A(lambda L: f"{L.base}/DOCS/a.md", OUTSIDE),
    "case-variant-dotdot": A(lambda L: f"{L.docs}/SUB/../../outside/secret.md", OUTSIDE),
    # Unicode and encoding look-alikes: one odd name inside the root, not a separator or ..
    "unicode-division-slash": A(lambda L: f"{L.docs}/..\u2215outside\u2215secret.md", NOT_FOUND),
    "unicode-fullwidth-solidus": A(lambda L: f"{L.docs}/..\uff0foutside\uff0fsecret.md", NOT_FOUND),
    "unicode-fullwidth-dots": A(lambda L: f"{L.docs}/\uff0e\uff0e/outside/secret.md", NOT_FOUND),
    "unicode-one-dot-leader": A(lambda L: f"{L.docs}/\u2024\u2024/outside/secret.md", NOT_FOUND),
    "unicode-combining-dot": A(lambda L: f"{L.docs}/.\u0307./outside/secret.md", NOT_FOUND),
    "percent-encoded-dots": A(lambda L: f"{L.docs}/%2e%2e/outside/secret.md", NOT_FOUND),
    "backslash-separators": A(lambda L: f"{L.docs}/..\\outside\\secret.md", NOT_FOUND),
    # NUL bytes, home directories, relative paths
    "nul-byte": A(lambda L: f"{L.docs}/a.md\x00/../../outside/secret.md", INVALID),
    "tilde-home": A(lambda L: "~/secret.md", OUTSIDE),
    "tilde-user": A(lambda L: "~root/.bashrc", OUTSIDE),
    "relative-dotdot": A(lambda L: "../../outside/secret.md", OUTSIDE, INVALID),
    "relative-symlink-name": A(lambda L: "rel-out.md", OUTSIDE, INVALID),
    "blank": A(lambda L: "   ", INVALID),
    "name-too-long": A(lambda L: f"{L.docs}/{'a' * 300}.md", INVALID),
    # /proc and /dev views of the file system
    "proc-self-root": A(lambda L: f"/proc/self/root{L.outside}/secret.md", OUTSIDE),
    "proc-self-root-dotdot": A(lambda L: f"/proc/self/root{L.docs}/../outside/secret.md", OUTSIDE),
    "proc-self-cwd-symlink": A(lambda L: "/proc/self/cwd/rel-out.md", OUTSIDE),
    "proc-self-fd": A(lambda L: f"/proc/self/fd/{L.fd}", OUTSIDE),
    "dev-fd": A(lambda L: f"/dev/fd/{L.fd}", OUTSIDE),
}
"""Through MCP, `relative-symlink-name` is a bare name; a filePath must be absolute, so every tool refuses it
(data and URL items go by `source`)."""

ATTEMPT_PARAMS = [pytest.param(name, id=name) for name in ATTEMPTS]


@pytest.fixture
def attack_env(layout: Layout, monkeypatch: pytest.MonkeyPatch) -> Layout:
    """The working directory is docs/sub (relative paths start there); $HOME is the outside folder."""
    monkeypatch.chdir(layout.docs / "sub")
    monkeypatch.setenv("HOME", str(layout.outside))
    return layout


def _outside_sources(app: Appliance, docs: Path) -> list[str]:
    return [s.source_id for s in app.index.registry.source_rows() if not Path(s.source_id).is_relative_to(docs)]


# ------------------------------------------------------------------ service entry points

SERVICE: dict[str, Callable[[Appliance, str], Any]] = {
    "read": lambda app, p: app.read(p),
    "delete": lambda app, p: app.delete(p),
    "read_neighbors": lambda app, p: app.read_neighbors(p, False, 0),
    "ingest": lambda app, p: app.ingest([p]),
    "sync": lambda app, p: app.sync(p),
    "sync_start": lambda app, p: app.sync_start(p),
    "list_files": lambda app, p: app.list_files(scope=p),
    "grep": lambda app, p: app.grep("TOPSECRET", scope=p),
}


@pytest.fixture(scope="module")
def service(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Appliance:
    """No model is loaded: every attempt must be refused before anything is converted or embedded."""
    settings = load_settings({"BASE_DIR": str(layout.docs), "DB_PATH": str(tmp_path_factory.mktemp("svc") / "db")})
    return Appliance(settings)


@pytest.mark.parametrize("entry", list(SERVICE))
@pytest.mark.parametrize("attempt", ATTEMPT_PARAMS)
def test_path_escape_is_refused_by_the_service(attempt: str, entry: str, attack_env: Layout,
                                               service: Appliance) -> None:
    path = ATTEMPTS[attempt].path(attack_env)
    with pytest.raises(ApplianceError) as caught:
        SERVICE[entry](service, path)
    error = caught.value
    assert error.code == ATTEMPTS[attempt].service, error.to_dict()
    assert SECRET not in json.dumps(error.to_dict())
    if error.code == OUTSIDE:
        assert "outside the configured document roots" in error.message
        named = os.path.normpath(os.path.join(os.getcwd(), os.path.expanduser(path)))
        assert named.lstrip("/") in error.message, error.message
    if entry in ("ingest", "sync"):
        assert _outside_sources(service, attack_env.docs) == []


# ------------------------------------------------------------------ MCP tools

MCP: dict[str, Callable[[str], dict[str, Any]]] = {
    "ingest_file": lambda p: {"filePath": p},
    "read_file": lambda p: {"filePath": p},
    "delete_file": lambda p: {"filePath": p},
    "read_chunk_neighbors": lambda p: {"filePath": p, "chunkIndex": 0},
    "sync_start": lambda p: {"path": p},
    "list_files": lambda p: {"scope": p},
    "grep": lambda p: {"pattern": "TOPSECRET", "scope": p},
}


def call_tool(server: Any, name: str, args: dict[str, Any]) -> Any:
    async def run() -> Any:
        async with Client(server) as client:
            return await client.call_tool(name, args, raise_on_error=False)

    return asyncio.run(run())


@pytest.fixture(scope="module")
def mcp_server(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = tmp_path_factory.mktemp("mcp") / "db"
    return create_server(Runtime(read_environment(), {"base_dirs": [str(layout.docs)], "db_path": str(db)}))


@pytest.mark.parametrize("tool", list(MCP))
@pytest.mark.parametrize("attempt", ATTEMPT_PARAMS)
def test_path_escape_is_refused_by_the_mcp_tool(attempt: str, tool: str, attack_env: Layout, mcp_server: Any) -> None:
    spec = ATTEMPTS[attempt]
    result = call_tool(mcp_server, tool, MCP[tool](spec.path(attack_env)))
    assert result.is_error, result.structured_content
    error = result.structured_content["error"]
    assert error["code"] == spec.mcp_code(tool), error
    assert SECRET not in json.dumps(result.structured_content)


# ------------------------------------------------------------------ the same entry points accept what is inside

@pytest.mark.model
def test_inside_paths_work_and_a_sync_skips_every_escaping_link(layout: Layout, make_app, tmp_path: Path,
                                                                 models_dir: Path) -> None:
    """The control: the refusals above are not an entry point refusing everything."""
    app = make_app(layout.docs)
    report = app.sync()
    indexed = sorted(s.source_id for s in app.index.registry.source_rows())
    assert indexed == [str(layout.docs / n) for n in ("a.md", "inner-link.md", "sub/b.md")], report.to_dict()
    found = app.search("TOPSECRET_PAYLOAD_9931 secret lives outside the root", sections="full")
    wire = found.wire()  # its hits and sections; the query echoed back holds the word, of course
    assert found.results and SECRET not in json.dumps([wire["results"], wire["parents"]])
    a = str(layout.docs / "a.md")
    assert app.read(a).content.startswith("# Alpha")
    assert app.read_neighbors(a, False, 0).chunks
    assert app.ingest([a]).updated == 1
    assert app.sync(str(layout.docs / "sub")).unchanged == 1
    assert [f.file_path for f in app.list_files(scope=str(layout.docs / "sub")).files] == [
        str(layout.docs / "sub" / "b.md")]
    server = create_server(Runtime(read_environment(), {"base_dirs": [str(layout.docs)],
                                                        "db_path": str(app.settings.db_path),
                                                        "models_dir": str(models_dir)}))
    for tool, args in (("read_file", {"filePath": a}), ("read_chunk_neighbors", {"filePath": a, "chunkIndex": 0}),
                       ("list_files", {"scope": str(layout.docs)}), ("grep", {"pattern": "Alpha", "scope": a}),
                       ("delete_file", {"filePath": a})):
        result = call_tool(server, tool, args)
        assert not result.is_error, (tool, result.structured_content)
    assert app.delete(str(layout.docs / "sub" / "b.md")).deleted


# ------------------------------------------------------------------ SSRF through ingest_url

@pytest.fixture
def url_ingest(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeResolver:
    """ALLOW_URL_INGEST=1; the fetcher's default resolver answers from the fake table, and
    127.0.0.2 (the 'public' test server) counts as public. Returns the resolver."""
    resolver = FakeResolver({**refused_names_resolver().table, "public.test": [PUBLIC_IP]})
    monkeypatch.setenv("ALLOW_URL_INGEST", "1")
    monkeypatch.setenv("ALLOW_PRIVATE_URLS", "0")
    monkeypatch.setitem(fetch.fetch_url.__kwdefaults__, "resolver", resolver)
    monkeypatch.setitem(fetch.fetch_url.__kwdefaults__, "treat_as_public", (PUBLIC_IP,))
    monkeypatch.setitem(fetch.fetch_url.__kwdefaults__, "timeout_s", 10.0)
    (tmp_path / "docs").mkdir()
    return resolver


def url_app(tmp_path: Path) -> Appliance:
    return Appliance(load_settings(dict(os.environ, BASE_DIR=str(tmp_path / "docs"), DB_PATH=str(tmp_path / "db"))))


def url_server(tmp_path: Path) -> Any:
    return create_server(Runtime(read_environment(), {"base_dirs": [str(tmp_path / "docs")],
                                                      "db_path": str(tmp_path / "db")}))


def named_host(url: str) -> str | None:
    """The host as a refusal names it: lower case, IPv6 compressed."""
    host = urlsplit(url).hostname
    if host is None:
        return None
    host = (host if host.isascii() else host.encode("idna").decode("ascii")).rstrip(".")
    try:
        return str(ipaddress.IPv6Address(host)) if ":" in host else host
    except ValueError:
        return host


def assert_refusal_names_host_and_reason(message: str, url: str, reason: str) -> None:
    assert reason in message, message
    host = named_host(url)
    if host is not None:
        assert host in message.lower(), message
    assert message.startswith("Refusing"), message


SSRF_CASES = [pytest.param(url, reason, id=name) for name, url, reason in REFUSED + BAD_URLS]


@pytest.mark.parametrize("url,reason", SSRF_CASES)
def test_ssrf_is_refused_by_the_service(url: str, reason: str, url_ingest: FakeResolver, tmp_path: Path) -> None:
    app = url_app(tmp_path)
    with pytest.raises(ApplianceError) as caught:
        app.ingest_url(url)
    assert caught.value.code == "url_refused", caught.value.to_dict()
    assert_refusal_names_host_and_reason(caught.value.message, url, reason)
    assert app.index.registry.source_rows() == []


@pytest.mark.parametrize("url,reason", SSRF_CASES)
def test_ssrf_is_refused_by_the_mcp_tool(url: str, reason: str, url_ingest: FakeResolver, tmp_path: Path) -> None:
    result = call_tool(url_server(tmp_path), "ingest_url", {"url": url})
    assert result.is_error, result.structured_content
    error = result.structured_content["error"]
    if url.lower().startswith(("http://", "https://")) and len(url) >= 8:
        assert error["code"] == "url_refused", error
        assert_refusal_names_host_and_reason(error["message"], url, reason)
    else:  # other schemes never reach the fetcher: the tool's input schema allows http(s) only
        assert error["code"] == "invalid_argument" and "url" in error["message"], error


REDIRECT_TARGETS = [
    pytest.param("http://{internal}/secret", PRIVATE_IP, "loopback", id="redirect-to-loopback-service"),
    pytest.param("http://169.254.169.254/latest/meta-data/", "169.254.169.254", "link-local",
                 id="redirect-to-cloud-metadata"),
    pytest.param("http://10.0.0.5/admin", "10.0.0.5", "private", id="redirect-to-private-10"),
    pytest.param("http://[::ffff:192.168.0.1]/", "::ffff:c0a8:1", "IPv4-mapped", id="redirect-to-mapped-private"),
    pytest.param("http://0x7f.1:{port}/secret", "0x7f.1", "resolves to 127.0.0.1", id="redirect-to-numeric-loopback"),
    pytest.param("gopher://127.0.0.1:6379/_INFO", "gopher", "scheme gopher:", id="redirect-to-gopher"),
]


@pytest.mark.parametrize("target,host,reason", REDIRECT_TARGETS)
def test_redirect_to_an_internal_address_is_refused_at_the_entry_points(
        target: str, host: str, reason: str, url_ingest: FakeResolver, public: Any, internal: Any,
        tmp_path: Path) -> None:
    public.routes["/go"] = redirect(target.format(internal=f"{PRIVATE_IP}:{internal.port}", port=internal.port))
    url = f"http://public.test:{public.port}/go"
    with pytest.raises(ApplianceError) as caught:
        url_app(tmp_path).ingest_url(url)
    result = call_tool(url_server(tmp_path), "ingest_url", {"url": url})
    for message in (caught.value.message, result.structured_content["error"]["message"]):
        assert host in message and reason in message and "redirected" in message, message
    assert caught.value.code == result.structured_content["error"]["code"] == "url_refused"
    assert internal.requests == []


def test_dns_rebinding_on_the_redirect_hop_is_refused(url_ingest: FakeResolver, public: Any, internal: Any,
                                                      tmp_path: Path) -> None:
    """rebind.test answers public for the first lookup and 127.0.0.1 for the second (the redirect hop)."""
    url_ingest.table["rebind.test"] = [[PUBLIC_IP], [PRIVATE_IP]]
    public.routes["/first"] = redirect("/second")
    internal.routes["/second"] = page(b"internal")
    with pytest.raises(ApplianceError) as caught:
        url_app(tmp_path).ingest_url(f"http://rebind.test:{public.port}/first")
    assert caught.value.code == "url_refused"
    assert_refusal_names_host_and_reason(caught.value.message, "http://rebind.test/", "loopback")
    assert url_ingest.calls == ["rebind.test", "rebind.test"]
    assert internal.requests == []


@pytest.mark.model
def test_dns_rebinding_cannot_swap_the_address_after_the_check(url_ingest: FakeResolver, public: Any,
                                                               internal: Any, make_app, tmp_path: Path) -> None:
    """Public for the check, private for a second lookup that never happens: the page indexed is the public one."""
    url_ingest.table["rebind.test"] = [[PUBLIC_IP], [PRIVATE_IP]]
    public.routes["/doc"] = page(b"<title>Public</title><p>public page about glaciers</p>")
    internal.routes["/doc"] = page(f"<p>{SECRET}</p>".encode())
    app = make_app(ALLOW_URL_INGEST="1")
    url = f"http://rebind.test:{public.port}/doc"
    assert app.ingest_url(url).added == 1
    assert "glaciers" in app.read(url, is_source=True).content
    assert url_ingest.calls == ["rebind.test"]
    assert internal.requests == []


def test_url_ingest_off_refuses_before_any_lookup(url_ingest: FakeResolver, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("ALLOW_URL_INGEST", "0")
    with pytest.raises(ApplianceError) as caught:
        url_app(tmp_path).ingest_url("http://127.0.0.1/")
    result = call_tool(url_server(tmp_path), "ingest_url", {"url": "http://127.0.0.1/"})
    assert caught.value.code == result.structured_content["error"]["code"] == "url_ingest_disabled"
    assert url_ingest.calls == []
