"""Fuzzing with properties: chunker, title chooser, scope matcher, path containment, URL guard, MCP tools.

Example counts are bounded for CI; `FAULTS_FULL=1` (what `make faults` sets) multiplies them.
Every property states what must hold, not only that nothing crashes.
"""
from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st

from appliance.config import load_settings
from appliance.errors import InvalidArgument, NotFound, PathOutsideRoots, UrlRefused
from appliance.ingest.chunk import CODE_BLOCK_BUDGETS, chunk_document, collapse_whitespace, reconstruct
from appliance.ingest.discover import FoundFile, contained_root, resolve_in_roots, walk
from appliance.ingest.fetch import UrlFetchFailed, _parse, _resolve_and_vet, address_refusal
from appliance.ingest.titles import choose_title
from appliance.search.hybrid import scope_prefix
from appliance.storage.filters import Filter
from appliance.storage.tables import SourceRow, filter_sql, sql_str

pytestmark = pytest.mark.faults

FULL = os.environ.get("FAULTS_FULL", "").strip() not in ("", "0")


def examples(n: int) -> int:
    """CI count, or ten times it under FAULTS_FULL=1."""
    return n * 10 if FULL else n


def fuzz(n: int, **kw: Any):  # type: ignore[no-untyped-def]
    return settings(max_examples=examples(n), deadline=None, derandomize=not FULL,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large, HealthCheck.filter_too_much], **kw)


def count(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text))


# ------------------------------------------------------------------ chunker

hostile_lines = st.sampled_from([
    "```", "~~~", "````py", "| a | b |", "|---|---|", "| x |", "> > > quote", "- item", "    indented code",
    "# H", "###### deep", "#", "<!-- Slide number: 1 -->", "[00:01:02] Speaker: hi", "00:00:01.000 --> 00:00:02.000",
    "\u202e\u2066bidi\u2069", "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029", "\ufeff", "Ω" * 300, "a" * 2000, "",
    "word " * 400, "漢字" * 500, "👩‍👩‍👧" * 100, "\r", "\t\t", "|" * 500,
])
markdown_docs = st.lists(hostile_lines | st.text(max_size=200), min_size=1, max_size=40).map("\n".join)


@fuzz(150)
@given(markdown_docs, st.integers(16, 96), st.one_of(st.none(), st.integers(0, 200)))
@example("```\n" + "x " * 5000, 16, 0)
@example("|" * 5000, 16, None)
def test_chunker_gives_the_text_back_within_the_ceiling(md: str, budget: int, slack: int | None) -> None:
    """Bodies rebuild the document; no unit exceeds the ceiling (or 4 budgets without one)."""
    ceiling = None if slack is None else budget + slack
    chunks = chunk_document(md, count_tokens=count, budget=budget, title="T", ceiling=ceiling)
    if not md.strip():
        assert chunks == []
        return
    assert collapse_whitespace(reconstruct(chunks)) == collapse_whitespace(md)
    cap = CODE_BLOCK_BUDGETS * budget if ceiling is None else max(budget, min(ceiling, CODE_BLOCK_BUDGETS * budget))
    for c in chunks:
        assert count(c.text) <= cap, (c.index, count(c.text), cap)
        assert c.text[c.body_start:] == c.body
    assert [c.index for c in chunks] == list(range(len(chunks)))


# ------------------------------------------------------------------ titles

def _no_breaks(title: str) -> bool:
    return len(title.splitlines()) <= 1 and title == title.strip()


names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=60)


@fuzz(200)
@given(st.one_of(st.none(), st.text(max_size=80)), markdown_docs, st.one_of(st.none(), names),
       st.sampled_from(["", ".md", ".pdf", ".docx", ".txt"]))
@example(None, "# \u2028\n", "x\u2029y", ".md")
@example(None, "no heading", "\x1c\x1d", ".md")
def test_title_is_one_clean_line_from_the_documented_sources(meta: str | None, md: str, stem: str | None,
                                                             ext: str) -> None:
    """A title is None or one trimmed line, taken from metadata, the text or the file name - nothing else."""
    path = None if stem is None else Path("/docs") / (stem + ext)
    assume(path is None or path.name not in (".", ".."))
    title = choose_title(metadata_title=meta, markdown=md, path=path)
    if title is None:
        assert path is None or not " ".join(path.name[: len(path.name) - len(path.suffix)].replace("_", " ").split())
        return
    assert title.strip() and _no_breaks(title), repr(title)
    if meta is not None and meta.strip():
        assert title == " ".join(meta.split())
        return
    words = set(re.findall(r"[^\W_]+", title))
    sources = md + " " + ("" if path is None else path.name.replace("_", " "))
    assert all(w in sources for w in words), (title, md[:200], path)


# ------------------------------------------------------------------ scope matcher

@pytest.fixture(scope="module")
def scope_app(tmp_path_factory: pytest.TempPathFactory, models_dir: Path):  # type: ignore[no-untyped-def]
    from appliance.service import Appliance

    base = tmp_path_factory.mktemp("scope")
    docs = base / "docs"
    (docs / "proj").mkdir(parents=True)
    settings_ = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(base / "index"), "MODELS_DIR": str(models_dir)})
    return Appliance(settings_)


segment = st.text(st.sampled_from("ab-_.'\"%\\ж /*?[]"), min_size=1, max_size=6)


@fuzz(60)
@given(st.lists(segment, min_size=1, max_size=3).map("/".join), st.lists(segment, max_size=12))
@example("proj", ["proj", "proj/a", "proj-secret", "project", "proj/", "pro", "proj'/x"])
@example("it's", ["it's", "it's/x", "it'", "it''s"])
@example("a%", ["a%", "a%/b", "abc", "a_/x"])
def test_scope_matches_exactly_the_ids_under_it(scope_app, scope: str, suffixes: list[str]) -> None:  # type: ignore[no-untyped-def]
    """A source-id scope matches the id itself and ids under it after a '/', nothing else (quotes,
    wildcards and backslashes included): run against LanceDB, not re-implemented."""
    assume(scope.strip() and scope.strip("/") and not scope.startswith(("/", "~")) and "\x00" not in scope)
    ids = sorted({scope, scope + "/x", *(scope + s for s in suffixes), *suffixes} - {""})
    ids = [i for i in ids if i.strip() and not i.startswith("/")]
    index = scope_app.index
    index.writes.delete_sources([r.source_id for r in index.registry.source_rows()])
    index.writes.record_sources([SourceRow(source_id=i, source_kind="data") for i in ids])
    where = Filter(scope_prefix(scope_app.resources, scope))
    got = {r.source_id for r in index.registry.source_rows(filter_sql(where))}
    prefix = scope.rstrip("/")
    want = {i for i in ids if i == prefix or i.startswith(prefix + "/")}
    assert got == want
    assert {i for i in ids if where.keeps({"source_id": i, "doc_class": "note"})} == want  # the search's own check


@fuzz(60)
@given(st.lists(st.sampled_from(["proj", "..", ".", "", "x", "proj-secret", "~", "docs"]), max_size=6))
def test_path_scope_stays_inside_the_roots(scope_app, parts: list[str]) -> None:  # type: ignore[no-untyped-def]
    """An absolute scope outside every root is refused; an accepted one matches only paths at or under it."""
    root = scope_app.settings.roots[0]
    scope = str(root) + "/" + "/".join(parts)
    try:
        clause = filter_sql(Filter(scope_prefix(scope_app.resources, scope)))
    except InvalidArgument:
        target = Path(os.path.normpath(scope))
        assert contained_root(target, [root]) is None and not root.is_relative_to(target)
        return
    target = Path(os.path.normpath(scope))
    assert contained_root(target, [root]) is not None or root.is_relative_to(target)
    assert clause.startswith(f"(source_id = {sql_str(str(target))} OR starts_with(source_id, "), clause


# ------------------------------------------------------------------ path containment

@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("contain")
    root, outside = base / "root", base / "outside"
    (root / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    (root / "a" / "doc.md").write_text("x")
    (root / "a" / "b" / "deep.md").write_text("x")
    (outside / "secret.md").write_text("x")
    os.symlink(outside, root / "out")                      # directory link out
    os.symlink(outside / "secret.md", root / "a" / "s.md")  # file link out
    os.symlink(root / "a", root / "in")                    # link inside
    os.symlink("..", root / "a" / "b" / "up")              # relative link up, still inside
    os.symlink("../../..", root / "a" / "b" / "up3")       # relative link that climbs out
    os.symlink(root, root / "a" / "loop")                  # loop back to the root
    os.symlink("nowhere", root / "dangling")
    os.symlink(root / "a" / "outer_root_link", root / "a" / "outer_root_link")  # self loop
    return root, outside


path_parts = st.lists(st.sampled_from(
    ["a", "b", "doc.md", "deep.md", "secret.md", "out", "in", "up", "up3", "loop", "dangling", "..", ".", "",
     "outer_root_link", "s.md", "~", "nope", "ж", "a b", "%2e%2e"]), max_size=8)


@fuzz(300)
@given(path_parts, st.sampled_from(["root", "outside", "relative", "slash"]), st.booleans(), st.booleans())
def test_containment_never_returns_a_path_outside_the_roots(tree, parts: list[str], start: str,  # type: ignore[no-untyped-def]
                                                          must_exist: bool, absolute: bool) -> None:
    root, outside = tree
    base = {"root": str(root), "outside": str(outside), "relative": "", "slash": "/"}[start]
    raw = "/".join([base, *parts]) if base else "/".join(parts)
    try:
        path, where = resolve_in_roots(raw, (root,), cwd=root, require_absolute=absolute, must_exist=must_exist)
    except (InvalidArgument, PathOutsideRoots, NotFound):
        return
    assert where == root
    assert Path(os.path.realpath(path)).is_relative_to(root), (raw, path)
    assert ".." not in path.parts
    if must_exist:
        assert path.exists()


@fuzz(40)
@given(st.lists(st.tuples(st.sampled_from(["d1", "d1/d2", "d3", ""]), st.sampled_from(["l1", "l2", "l3.md"]),
                          st.sampled_from(["..", "../..", "../../..", "/", ".", "d1", "l1", "l2", "f.md", "/etc"])),
                max_size=6))
def test_walk_yields_only_files_inside_the_roots(tmp_path_factory: pytest.TempPathFactory,
                                                 links: list[tuple[str, str, str]]) -> None:
    """Random symlink trees (loops, escapes, chains): every file the scan yields is really inside."""
    base = tmp_path_factory.mktemp("walk")
    root = base / "root"
    (root / "d1" / "d2").mkdir(parents=True)
    (root / "d3").mkdir()
    (root / "f.md").write_text("x")
    (base / "secret.md").write_text("x")
    for where, name, target in links:
        link = root / where / name
        if not os.path.lexists(link):
            os.symlink(target, link)
    found = [item for item in walk((root,), frozenset({".md"})) if isinstance(item, FoundFile)]
    for item in found:
        assert Path(os.path.realpath(item.path)).is_relative_to(root), item.path
    assert len({str(f.path) for f in found}) == len(found)


# ------------------------------------------------------------------ URL guard

NON_PUBLIC_V4 = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
                 "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
                 "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32"]
NON_PUBLIC_V6 = ["::1/128", "::/128", "fe80::/10", "fc00::/7", "ff00::/8", "fec0::/10", "2001:db8::/32",
                 "64:ff9b:1::/48", "100::/64", "3fff::/20"]
non_public_v4 = st.sampled_from(NON_PUBLIC_V4).flatmap(lambda n: st.ip_addresses(network=n))
non_public_v6 = st.sampled_from(NON_PUBLIC_V6).flatmap(lambda n: st.ip_addresses(network=n))


def embeddings(v4: ipaddress.IPv4Address) -> list[ipaddress.IPv6Address]:
    n = int(v4)
    return [
        ipaddress.IPv6Address((0xFFFF << 32) | n),                           # ::ffff:a.b.c.d
        ipaddress.IPv6Address(n),                                           # ::a.b.c.d (compatible)
        ipaddress.IPv6Address((0x2002 << 112) | (n << 80)),                  # 6to4
        ipaddress.IPv6Address((0x64FF9B << 96) | n),                         # NAT64
        ipaddress.IPv6Address((0x20010000 << 96) | (n << 64) | (n ^ 0xFFFFFFFF)),  # Teredo: server, ~client
    ]


@fuzz(300)
@given(non_public_v4 | non_public_v6)
def test_no_private_loopback_or_reserved_address_is_approved(ip: ipaddress._BaseAddress) -> None:
    assert address_refusal(ip) is not None, ip
    if isinstance(ip, ipaddress.IPv4Address) and int(ip) > 1:
        for v6 in embeddings(ip):
            assert address_refusal(v6) is not None, (ip, v6)


@fuzz(300)
@given(st.ip_addresses())
def test_an_approved_address_is_global_unicast(ip: ipaddress._BaseAddress) -> None:
    if address_refusal(ip) is None:
        assert ip.is_global and not ip.is_multicast and not ip.is_loopback and not ip.is_private, ip
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            assert ip.ipv4_mapped.is_global


def spellings(v4: ipaddress.IPv4Address) -> list[str]:
    """Numeric host forms inet_aton accepts for the same address."""
    a, b, c, d = v4.packed
    n = int(v4)
    return [str(v4), str(n), hex(n), f"0{n:o}", f"{a}.{(b << 16) | (c << 8) | d}", f"{a}.{b}.{(c << 8) | d}",
            f"0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}", f"0{a:o}.0{b:o}.0{c:o}.0{d:o}", f"[::ffff:{v4}]"]


def numeric_only(host, port, family=0, type=0, proto=0, flags=0):  # type: ignore[no-untyped-def]
    """The system resolver, restricted to numeric hosts: never a DNS query."""
    return socket.getaddrinfo(host, port, family, type, proto, socket.AI_NUMERICHOST)


@fuzz(200)
@given(non_public_v4, st.sampled_from(["http", "https", "HTTP"]), st.sampled_from(["", ":80", ":8080", ":1"]),
       st.sampled_from(["/", "/a?b=c", "", "/%2e%2e/"]), st.integers(0, 8))
def test_numeric_spellings_of_private_addresses_are_refused(ip: ipaddress.IPv4Address, scheme: str, port: str,
                                                            path: str, which: int) -> None:
    host = spellings(ip)[which]
    url = f"{scheme}://{host}{port}{path}"
    try:
        target = _parse(url, None)
        _resolve_and_vet(target, origin=None, resolver=numeric_only, allow_private=False,
                         treat_as_public=frozenset())
    except (UrlRefused, UrlFetchFailed):  # a host the OS cannot parse never reaches a connection either
        return
    raise AssertionError(f"{url} ({ip}) was approved")


def fixed_resolver(ips: list[str]):  # type: ignore[no-untyped-def]
    def resolve(host, port, family=0, type=0, proto=0, flags=0):  # type: ignore[no-untyped-def]
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (ip, port, 0, 0) if ":" in ip else (ip, port)) for ip in ips]
    return resolve


url_text = st.one_of(
    st.text(max_size=80),
    st.builds(lambda s, u, h, p: f"{s}://{u}{h}{p}", st.sampled_from(["http", "https", "ftp", "file", "javascript",
                                                                      "HtTpS", ""]),
              st.sampled_from(["", "user:pw@", "@", "a@b@"]),
              st.sampled_from(["example.org", "ex ample.org", "exa\x00mple", "[::1]", "[fe80::1%25eth0]", "例え.jp",
                               "xn--", "-x-.org", "a" * 300, "", "%31%32%37.0.0.1", "[", "]", "1.2.3.4.5"]),
              st.sampled_from(["", "/", ":99999", ":-1", ":0", "/#frag", "?q", "\\\\evil", "/\r\nHost: x"])),
)


@fuzz(300)
@given(url_text, st.lists(non_public_v4 | non_public_v6 | st.ip_addresses(), min_size=1, max_size=4))
def test_url_guard_approves_only_public_targets(url: str, ips: list[ipaddress._BaseAddress]) -> None:
    """Any URL, any resolver answer: UrlRefused/UrlFetchFailed, or every address to connect to is public."""
    try:
        target = _parse(url, None)
    except UrlRefused:
        return
    assert target.scheme in ("http", "https")
    assert not any(ord(c) < 0x21 for c in target.url)
    try:
        approved = _resolve_and_vet(target, origin=None, resolver=fixed_resolver([str(i) for i in ips]),
                                    allow_private=False, treat_as_public=frozenset())
    except UrlRefused:
        assert any(address_refusal(i) for i in ips)
        return
    assert approved
    for _family, sockaddr in approved:
        assert address_refusal(ipaddress.ip_address(sockaddr[0])) is None


def test_regression_unparseable_url_is_refused_not_raised() -> None:
    """urlsplit's ValueError ("Invalid IPv6 URL") escaped the guard: ingest_url answered internal_error."""
    for url in ["http://[", "https://[::1/x", "http://[a]b/", "A://["]:
        with pytest.raises(UrlRefused):
            _parse(url, None)


def test_regression_whole_ietf_block_and_new_documentation_prefix_are_refused() -> None:
    """Python 3.11.7's tables leave 192.0.0.8-.255 and 3fff::/20 'global'; the guard approved them."""
    for ip in ["192.0.0.8", "192.0.0.9", "192.0.0.171", "192.0.0.255", "3fff::1", "::ffff:192.0.0.8"]:
        assert address_refusal(ipaddress.ip_address(ip)) is not None, ip


# ------------------------------------------------------------------ MCP tools over a live stdio session

PARAMS = {
    "sync_start": ["path"], "sync_status": ["jobId"], "ingest_file": ["filePath"],
    "ingest_data": ["content", "source", "format", "title"], "ingest_url": ["url"],
    "query_documents": ["query", "topK", "scope", "docClass"],
    "read_chunk_neighbors": ["filePath", "source", "chunkIndex", "before", "after"],
    "read_file": ["filePath", "source", "offset", "maxChars", "revision", "startLine", "endLine", "pageStart",
                  "pageEnd"],
    "list_files": ["scope", "limit", "cursor"], "delete_file": ["filePath", "source"],
    "status": [], "grep": ["pattern", "regex", "caseSensitive", "scope", "root", "fileGlob", "maxResults"],
    "list_roots": [],
}

HUGE = "ж" * 20_000  # over every string bound of the tools; as ingest_data content still ~40 chunks to embed
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.integers(-3, 3),
    st.floats(allow_nan=False), st.text(max_size=60),
    st.sampled_from(["", " ", "/", "/etc/passwd", "../../x", "C:\\x", "\x00", "ERR_ZORBLATT_7741", "(a+)+$",
                     "https://127.0.0.1/", "http://[::1]/", "markdown", "html", HUGE, "🙂" * 500, "a.md",
                     "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"), "'; DROP TABLE x; --",
                     "%s%n", "{{7*7}}", "\u202e", "-1", "1e309", "NaN"]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                              max_size=3), max_leaves=6)


def arguments(tool: str, root: Path) -> st.SearchStrategy[dict[str, Any]]:
    """Random values for the tool's own parameters (some missing, some extra), plus near-valid paths."""
    paths = st.sampled_from([str(root / "a.md"), str(root), str(root / "missing.md"), str(root / ".." / "x"),
                             str(root / "a.md") + "/", str(root / "sub" / "..") + "/a.md"])
    value = st.one_of(values, values, values, paths)  # a quarter near-valid: each valid ingest spawns a converter
    known = st.dictionaries(st.sampled_from(PARAMS[tool] or ["unused"]), value, max_size=len(PARAMS[tool]) + 1)
    extra = st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=2)
    return st.builds(lambda a, b: {**b, **a}, known, extra)


@pytest.fixture(scope="module")
def fuzz_session(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[Any]:
    """One stdio session on its own small corpus and index, with the server's stderr kept in a file."""
    from fastmcp.client.transports import StdioTransport

    import tests.adapters.conftest as adapters

    root = tmp_path_factory.mktemp("fuzz-corpus")
    (root / "a.md").write_text("# A\n\nSome text about ERR_ZORBLATT_7741.\n", "utf-8")
    log = tmp_path_factory.mktemp("fuzz-log") / "server.log"
    env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME", "MCP_INSTRUCTIONS_EXTRA")}
    env |= {"BASE_DIR": str(root), "DB_PATH": str(tmp_path_factory.mktemp("fuzz-index") / "db"),
            "MODELS_DIR": str(models_dir)}
    with log.open("w") as fh:
        original = adapters.StdioTransport
        adapters.StdioTransport = lambda *a, **kw: StdioTransport(*a, **kw, log_file=fh)  # type: ignore[misc]
        try:
            live = adapters.LiveSession(env)
        finally:
            adapters.StdioTransport = original
        live.root, live.log = root, log
        live.ok("ingest_file", {"filePath": str(root / "a.md")})
        yield live
        live.close()


@pytest.mark.model
@pytest.mark.parametrize("tool", sorted(PARAMS))
def test_random_arguments_get_structured_answers(tool: str, fuzz_session: Any) -> None:
    """Wrong types, huge strings, unicode, negative numbers, missing and extra fields: a result or a clean error."""
    @fuzz(8 if tool in ("ingest_file", "sync_start") else 25)  # each valid call starts a converter process
    @given(arguments(tool, fuzz_session.root))
    def check(args: dict[str, Any]) -> None:
        result = fuzz_session.call(tool, args)
        data = result.structured_content
        assert isinstance(data, dict), result
        if result.is_error:
            error = data["error"]
            assert isinstance(error["code"], str) and isinstance(error["message"], str)
            assert error["code"] != "internal_error", (args, error)
        else:
            assert data.get("error") is None  # sync jobs carry a null error field when healthy

    check()
    assert fuzz_session.ok("status")["version"]  # the session survived


@pytest.mark.model
def test_unknown_tools_and_raw_garbage_leave_the_session_alive(fuzz_session: Any) -> None:
    """Unknown tool names are protocol errors; the server keeps answering, and logged no traceback."""
    from mcp.shared.exceptions import MCPError

    for name in ["", "nope", "status\x00", "../status", "ж" * 5000]:
        try:
            result = fuzz_session.call(name, {})
        except (MCPError, Exception) as exc:  # noqa: BLE001 - the client raises for protocol errors
            assert "internal" not in str(exc).lower() or "unknown" in str(exc).lower()
        else:
            assert result.is_error
    assert fuzz_session.ok("status")["version"]
    text = fuzz_session.log.read_text("utf-8", "replace")
    assert "Traceback" not in text and "tool call failed" not in text, text[-3000:]
