"""The URL fetcher against SSRF: schemes, address classes, redirects, rebinding, limits.

No external network exists here; the loopback servers and the fake resolver are in
tests/fixtures/http_fakes.py (127.0.0.2 plays a public host, 127.0.0.1 the internal service).
"""
from __future__ import annotations

import gzip
import shutil
import socket
import ssl
import subprocess
import time

import pytest

from appliance.errors import UrlRefused
from appliance.ingest.fetch import (
    UrlFetchFailed,
    UrlTimeout,
    UrlTooLarge,
    address_refusal,
    fetch_url,
    page_to_converted,
)
from tests.fixtures.http_fakes import (
    BAD_URLS,
    PRIVATE_IP,
    PUBLIC_IP,
    REFUSED,
    FakeResolver,
    Server,
    page,
    redirect,
    refused_names_resolver,
    send,
)


def fetch_public(url: str, resolver: FakeResolver | None = None, **kw):
    resolver = resolver or FakeResolver({"public.test": [PUBLIC_IP]})
    kw.setdefault("allow_private", False)
    kw.setdefault("timeout_s", 10)
    return fetch_url(url, resolver=resolver, treat_as_public=[PUBLIC_IP], **kw)


# ------------------------------------------------------------------ refused before any connection
# The tables (REFUSED, BAD_URLS) live in tests/fixtures/http_fakes.py: tests/faults runs the
# same cases through the service and the MCP tool.


@pytest.mark.parametrize("url,fragment", [pytest.param(u, f, id=i) for i, u, f in REFUSED])
def test_internal_addresses_are_refused(url, fragment):
    resolver = refused_names_resolver()
    with pytest.raises(UrlRefused) as exc:
        fetch_url(url, allow_private=False, resolver=resolver, timeout_s=5)
    msg = str(exc.value)
    assert fragment in msg
    assert msg.startswith("Refusing to fetch from host ")
    assert exc.value.code == "url_refused"


@pytest.mark.parametrize("url,fragment", [pytest.param(u, f, id=i) for i, u, f in BAD_URLS])
def test_bad_urls_are_refused_before_resolution(url, fragment):
    resolver = FakeResolver()
    with pytest.raises(UrlRefused) as exc:
        fetch_url(url, allow_private=True, resolver=resolver)  # allow_private changes nothing here
    assert fragment in str(exc.value)
    assert "hunter2" not in str(exc.value)
    assert resolver.calls == []


def test_address_refusal_accepts_public_unicast():
    import ipaddress

    for ip in ("93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:93.184.216.34", "2002:5db8:d822::1"):
        assert address_refusal(ipaddress.ip_address(ip)) is None, ip


def test_unresolvable_name_is_a_fetch_error_not_a_refusal():
    def resolver(*args):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(UrlFetchFailed) as exc:
        fetch_url("http://nowhere.test/", allow_private=False, resolver=resolver)
    assert not isinstance(exc.value, UrlRefused)
    assert "nowhere.test" in str(exc.value)


# ------------------------------------------------------------------ real servers

def test_public_fetch_sends_original_host_and_returns_body(public):
    public.routes["/doc"] = page(b"<html><title>Hi</title><p>body</p></html>", "text/html; charset=ISO-8859-1")
    got = fetch_public(f"http://public.test:{public.port}/doc?x=1#frag")
    assert got.body.endswith(b"</html>")
    assert got.content_type == "text/html" and got.charset == "iso-8859-1"
    assert got.final_url == f"http://public.test:{public.port}/doc?x=1"
    assert public.requests == [("/doc?x=1", f"public.test:{public.port}")]


def test_redirect_to_internal_service_is_refused(public, internal):
    public.routes["/go"] = redirect(f"http://{PRIVATE_IP}:{internal.port}/secret")
    with pytest.raises(UrlRefused) as exc:
        fetch_public(f"http://public.test:{public.port}/go")
    msg = str(exc.value)
    assert f"host '{PRIVATE_IP}'" in msg and "loopback" in msg and "redirected" in msg
    assert internal.requests == []


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("http://169.254.169.254/latest/meta-data/", id="metadata"),
        pytest.param("http://localhost/admin", id="localhost"),
        pytest.param("http://[::ffff:10.0.0.1]/", id="mapped-private"),
        pytest.param("http://2130706433/", id="decimal-loopback"),
    ],
)
def test_redirect_to_private_classes_is_refused(public, target):
    public.routes["/go"] = redirect(target, 301)
    resolver = FakeResolver({"public.test": [PUBLIC_IP], "localhost": ["127.0.0.1"]})
    with pytest.raises(UrlRefused, match="redirected"):
        fetch_public(f"http://public.test:{public.port}/go", resolver)


def test_redirect_to_file_scheme_is_refused(public):
    public.routes["/go"] = redirect("file:///etc/passwd")
    with pytest.raises(UrlRefused, match="scheme file:") as exc:
        fetch_public(f"http://public.test:{public.port}/go")
    assert "redirected" in str(exc.value)


def test_relative_redirect_is_followed_and_rechecked(public):
    public.routes["/a"] = redirect("/b", 307)
    public.routes["/b"] = page(b"<p>b</p>")
    resolver = FakeResolver({"public.test": [PUBLIC_IP]})
    got = fetch_public(f"http://public.test:{public.port}/a", resolver)
    assert got.body == b"<p>b</p>"
    assert resolver.calls == ["public.test", "public.test"]  # resolved and vetted per hop


@pytest.mark.parametrize("hops,ok", [pytest.param(5, True, id="five-redirects-ok"),
                                     pytest.param(6, False, id="six-redirects-refused")])
def test_redirect_chain_is_capped_at_five(public, hops, ok):
    for i in range(hops):
        public.routes[f"/r{i}"] = redirect(f"/r{i + 1}")
    public.routes[f"/r{hops}"] = page(b"end")
    url = f"http://public.test:{public.port}/r0"
    if ok:
        assert fetch_public(url).body == b"end"
    else:
        with pytest.raises(UrlFetchFailed, match="more than 5 redirects"):
            fetch_public(url)
        assert len(public.requests) == 6


def test_redirect_loop_stops(public):
    public.routes["/loop"] = redirect("/loop")
    with pytest.raises(UrlFetchFailed, match="redirects"):
        fetch_public(f"http://public.test:{public.port}/loop")


def test_rebinding_resolver_second_answer_is_never_used(public, internal):
    """Public for the check, private for 'the fetch': there is no second lookup to win."""
    public.routes["/doc"] = page(b"public content")
    internal.routes["/doc"] = page(b"internal content")
    # The resolver would answer 127.0.0.1 (the internal server) on a second call.
    resolver = FakeResolver({"rebind.test": [[PUBLIC_IP], [PRIVATE_IP]]})
    got = fetch_public(f"http://rebind.test:{public.port}/doc", resolver)
    assert got.body == b"public content"
    assert resolver.calls == ["rebind.test"]  # resolved once: the vetted answer was the one used
    assert internal.requests == []


def test_rebinding_on_a_later_hop_is_caught(public, internal):
    public.routes["/first"] = redirect("/second")
    resolver = FakeResolver({"rebind.test": [[PUBLIC_IP], [PRIVATE_IP]]})
    with pytest.raises(UrlRefused, match="redirected"):
        fetch_public(f"http://rebind.test:{public.port}/first", resolver)
    assert resolver.calls == ["rebind.test", "rebind.test"]
    assert [p for p, _ in public.requests] == ["/first"]
    assert internal.requests == []


def test_connection_goes_to_the_vetted_address_even_if_system_dns_disagrees(public, monkeypatch):
    """socket.getaddrinfo (what a second, library-made lookup would use) is never called."""
    public.routes["/doc"] = page(b"ok")

    def boom(*a, **k):
        raise AssertionError("a second name lookup happened")

    monkeypatch.setattr(socket, "getaddrinfo", boom)
    assert fetch_public(f"http://public.test:{public.port}/doc").body == b"ok"


def test_response_over_max_bytes_is_refused_by_content_length(public):
    public.routes["/big"] = page(b"x" * 5000)
    with pytest.raises(UrlTooLarge, match="4096-byte limit"):
        fetch_public(f"http://public.test:{public.port}/big", max_bytes=4096)


def test_response_over_max_bytes_is_refused_without_content_length(public):
    def stream(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Connection", "close")
        h.end_headers()
        for _ in range(100):
            try:
                h.wfile.write(b"y" * 1024)
            except OSError:
                return
        h.close_connection = True

    public.routes["/stream"] = stream
    with pytest.raises(UrlTooLarge):
        fetch_public(f"http://public.test:{public.port}/stream", max_bytes=10_000)


def test_gzip_bomb_is_refused_by_decompressed_size(public):
    bomb = gzip.compress(b"\0" * 2_000_000)
    public.routes["/bomb"] = lambda h: send(h, 200, bomb, "text/plain", Content_Encoding="gzip")
    with pytest.raises(UrlTooLarge):
        fetch_public(f"http://public.test:{public.port}/bomb", max_bytes=100_000)


def test_gzip_body_is_decoded(public):
    public.routes["/gz"] = lambda h: send(h, 200, gzip.compress(b"hello"), "text/plain", Content_Encoding="gzip")
    assert fetch_public(f"http://public.test:{public.port}/gz").body == b"hello"


def test_slow_server_times_out(public):
    def slow(h):
        time.sleep(3)
        send(h, 200, b"late")

    public.routes["/slow"] = slow
    t0 = time.monotonic()
    with pytest.raises(UrlTimeout):
        fetch_public(f"http://public.test:{public.port}/slow", timeout_s=0.5)
    assert time.monotonic() - t0 < 2.5


def test_trickling_server_hits_the_overall_deadline(public):
    def trickle(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", "100")
        h.end_headers()
        for _ in range(100):
            try:
                h.wfile.write(b"z")
                h.wfile.flush()
            except OSError:
                return
            time.sleep(0.1)

    public.routes["/trickle"] = trickle
    t0 = time.monotonic()
    with pytest.raises(UrlTimeout):
        fetch_public(f"http://public.test:{public.port}/trickle", timeout_s=0.8)
    assert time.monotonic() - t0 < 2.5


def test_http_error_status_is_a_fetch_error(public):
    with pytest.raises(UrlFetchFailed, match="HTTP 404"):
        fetch_public(f"http://public.test:{public.port}/missing")


def test_allow_private_fetches_loopback_directly(internal):
    got = fetch_url(f"http://{PRIVATE_IP}:{internal.port}/secret", allow_private=True, resolver=FakeResolver())
    assert b"internal admin token" in got.body
    resolver = FakeResolver({"localhost": ["127.0.0.1"]})
    got = fetch_url(f"http://localhost:{internal.port}/secret", allow_private=True, resolver=resolver)
    assert b"internal admin token" in got.body


def test_allow_private_still_refuses_other_schemes_on_redirect(internal):
    internal.routes["/to-file"] = redirect("file:///etc/passwd")
    with pytest.raises(UrlRefused, match="scheme file:"):
        fetch_url(f"http://{PRIVATE_IP}:{internal.port}/to-file", allow_private=True, resolver=FakeResolver())


def test_without_allow_private_the_same_loopback_url_is_refused(internal):
    with pytest.raises(UrlRefused, match="loopback"):
        fetch_url(f"http://{PRIVATE_IP}:{internal.port}/secret", allow_private=False, resolver=FakeResolver())
    assert internal.requests == []


# ------------------------------------------------------------------ conversion

def fetch_to_converted(url, **options):
    """The download, then the page's conversion (in a worker in the service: indexing.convert_page)."""
    return page_to_converted(fetch_url(url, **options))


def test_fetch_to_converted_html_title_and_markdown(public):
    html = "<html><head><title>Привет мир</title></head><body><h1>Заголовок</h1><p>Текст</p></body></html>"
    public.routes["/ru"] = page(html.encode("cp1251"), "text/html; charset=windows-1251")
    conv = fetch_to_converted(
        f"http://public.test:{public.port}/ru", allow_private=False,
        resolver=FakeResolver({"public.test": [PUBLIC_IP]}), treat_as_public=[PUBLIC_IP],
    )
    assert conv.title == "Привет мир"
    assert "# Заголовок" in conv.markdown and "Текст" in conv.markdown
    assert conv.metadata["url"].endswith("/ru")


def test_fetch_to_converted_html_without_charset_uses_meta(public):
    html = '<html><head><meta charset="windows-1251"><title>Документ</title></head><body><p>Слово</p></body></html>'
    public.routes["/meta"] = page(html.encode("cp1251"), "text/html")
    conv = fetch_to_converted(
        f"http://public.test:{public.port}/meta", allow_private=False,
        resolver=FakeResolver({"public.test": [PUBLIC_IP]}), treat_as_public=[PUBLIC_IP],
    )
    assert conv.title == "Документ" and "Слово" in conv.markdown


def test_fetch_to_converted_unsupported_type(public):
    from appliance.errors import UnsupportedFile

    public.routes["/img"] = page(b"\x89PNG....", "image/png")
    with pytest.raises(UnsupportedFile, match="image/png"):
        fetch_to_converted(
            f"http://public.test:{public.port}/img", allow_private=False,
            resolver=FakeResolver({"public.test": [PUBLIC_IP]}), treat_as_public=[PUBLIC_IP],
        )


# ------------------------------------------------------------------ https: SNI and certificate against the host name

@pytest.fixture
def tls_server(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=public.test", "-addext", "subjectAltName=DNS:public.test"],
        check=True, capture_output=True,
    )
    try:
        srv = Server(PUBLIC_IP)
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    sni: list[str | None] = []
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.sni_callback = lambda sock, name, _ctx: sni.append(name)
    srv.httpd.socket = ctx.wrap_socket(srv.httpd.socket, server_side=True)
    srv.routes["/tls"] = page(b"secure")
    client = ssl.create_default_context(cafile=str(cert))
    yield srv, client, sni
    srv.close()


def test_https_pins_address_and_verifies_certificate_for_the_host(tls_server):
    srv, client, sni = tls_server
    got = fetch_public(f"https://public.test:{srv.port}/tls", tls_context=client)
    assert got.body == b"secure"
    assert sni == ["public.test"]
    assert srv.requests == [("/tls", f"public.test:{srv.port}")]


def test_https_certificate_for_another_name_fails(tls_server):
    srv, client, _ = tls_server
    resolver = FakeResolver({"other.test": [PUBLIC_IP]})
    with pytest.raises(UrlFetchFailed, match="certificate"):
        fetch_public(f"https://other.test:{srv.port}/tls", resolver, tls_context=client)
