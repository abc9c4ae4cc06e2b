"""ingest_url's transport: fetch one http/https URL without becoming a way into the network.

The URL usually comes from an LLM, which may be repeating text from an indexed
document, so every URL and every redirect hop is treated as hostile:

* only http and https; credentials in the URL are refused;
* the host is resolved once, through the injected resolver, and every address it
  resolves to must be a public unicast address (`address_refusal`): loopback,
  link-local (cloud metadata), private, CGNAT, reserved, unspecified, multicast and
  IPv6 forms embedding such an IPv4 address (mapped, compatible, 6to4, Teredo, NAT64)
  are refused. Numeric host spellings (`2130706433`, `0x7f.1`, `127.1`) are resolved
  like any name and the resulting address is what gets checked;
* the socket is then connected to one of exactly those vetted addresses, with the
  original Host header and, for https, SNI and certificate verification against the
  host name. There is no second lookup for a rebinding DNS server to answer
  differently: the check and the connection use the same address;
* the same happens on every redirect hop, at most `max_redirects` of them;
* the body is read up to `max_bytes` and the whole fetch runs against one deadline.

`allow_private=True` (ALLOW_PRIVATE_URLS) switches off the address check only.
Environment proxies are ignored on purpose: the connection logic is all here.
"""
from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from appliance.chunks import Converted
from appliance.errors import ApplianceError, UnsupportedFile, UrlIngestDisabled, UrlRefused
from appliance.platform import netguard

MiB = 1 << 20
DEFAULT_MAX_BYTES = 20 * MiB
DEFAULT_TIMEOUT_S = 20.0
MAX_REDIRECTS = 5
USER_AGENT = "minirag-appliance (ingest_url)"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SockAddr = tuple[Any, ...]
"""socket.getaddrinfo's sockaddr: (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6."""
Pinned = tuple[int, SockAddr]
"""A vetted (family, sockaddr) to connect to."""
Resolver = Callable[..., list[tuple[Any, ...]]]
"""Same contract as socket.getaddrinfo(host, port, family, type)."""

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_CHARS = re.compile(r"^[A-Za-z0-9_.-]+$")


class UrlFetchFailed(ApplianceError):
    """The fetch did not work (name does not resolve, connection, HTTP status, redirects)."""

    code = "url_fetch_failed"
    hint = "Check the URL in a browser; the appliance fetches it once, without retries or proxies."


class UrlTimeout(UrlFetchFailed):
    code = "url_timeout"
    hint = "The server was too slow; try again later or fetch the page yourself and use ingest_data."


class UrlTooLarge(UrlRefused):
    code = "url_too_large"
    hint = "Download the document yourself and ingest the file, or raise the URL size limit."


@dataclass(frozen=True, slots=True)
class FetchedPage:
    url: str
    """The URL asked for."""
    final_url: str
    """The URL the body came from, after redirects."""
    content_type: str
    """Media type without parameters, lower case ("" when the server sent none)."""
    body: bytes
    charset: str | None
    """The charset parameter of Content-Type, if any."""


# ------------------------------------------------------------------ address classes

_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_IETF_PROTOCOL = ipaddress.IPv4Network("192.0.0.0/24")
"""IANA's IETF protocol assignments; Python before 3.11.10/3.12.4 counts only parts of it as private."""
_DOC_V6 = ipaddress.IPv6Network("3fff::/20")
"""The second IPv6 documentation prefix (RFC 9637), newer than the stdlib's tables."""
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")


def _class_refusal(ip: IPAddress) -> str | None:
    if ip.is_unspecified:
        return "unspecified address"
    if ip.is_loopback:
        return "loopback address"
    if ip.is_link_local:
        return "link-local address"
    if ip.is_multicast:
        return "multicast address"
    if isinstance(ip, ipaddress.IPv4Address):
        if ip in _CGNAT:
            return "carrier-grade NAT address (100.64.0.0/10)"
        if ip in _IETF_PROTOCOL:
            return "IETF protocol assignment address (192.0.0.0/24)"
        if ip == _BROADCAST:
            return "broadcast address"
    else:
        if ip.is_site_local:
            return "site-local address"
        if ip in _NAT64_LOCAL:
            return "local-use NAT64 address"
        if ip in _DOC_V6:
            return "documentation address (3fff::/20)"
    if ip.is_reserved:
        return "reserved address"
    if ip.is_private:
        return "private address"
    if not ip.is_global:
        return "address that is not globally routable"
    return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[str, list[ipaddress.IPv4Address]] | None:
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", [ip.ipv4_mapped]
    if ip.sixtofour is not None:
        return "6to4", [ip.sixtofour]
    if ip.teredo is not None:
        server, client = ip.teredo
        return "Teredo", [client, server]
    if ip in _NAT64:
        return "NAT64", [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    if int(ip) >> 32 == 0 and int(ip) > 1:
        return "IPv4-compatible", [ipaddress.IPv4Address(int(ip))]
    return None


def address_refusal(ip: IPAddress) -> str | None:
    """Why fetching from `ip` is refused, or None for a public unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
        embedded = _embedded_v4(ip)
        if embedded is not None:
            kind, inner = embedded
            for v4 in inner:
                reason = _class_refusal(v4)
                if reason:
                    article = "an" if reason[0] in "aeiou" else "a"
                    return f"{kind} IPv6 address embedding {v4}, {article} {reason}"
            if kind in ("IPv4-mapped", "IPv4-compatible"):
                return None  # the connection reaches that public IPv4 address itself
    return _class_refusal(ip)


# ------------------------------------------------------------------ URLs

@dataclass(frozen=True, slots=True)
class _Target:
    url: str
    scheme: str
    host: str
    """ASCII (IDNA) host name or IP literal, without brackets."""
    port: int
    request_path: str


def _describe(url: str, origin: str | None) -> str:
    return f"{url!r}" if origin is None else f"{url!r} (the fetch of {origin!r} was redirected there)"


def _parse(url: str, origin: str | None) -> _Target:
    where = _describe(url, origin)
    if not isinstance(url, str) or not url.strip():
        raise UrlRefused("Refusing to fetch an empty URL")
    url = url.strip()
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise UrlRefused(f"Refusing to fetch {where}: the URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. "Invalid IPv6 URL" for an unclosed bracket
        raise UrlRefused(f"Refusing to fetch {where}: the URL cannot be parsed ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise UrlRefused(
            f"Refusing to fetch {where}: scheme {scheme + ':' if scheme else '(none)'} is not "
            "allowed; only http and https URLs can be ingested",
            hint="Give an http:// or https:// URL; local files are ingested by path, inside the document roots.",
        )
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        # Not echoed: the message would carry the password into logs.
        shown = f"{scheme}://{parts.hostname or '?'}/..."
        tail = "" if origin is None else f" (the fetch of {origin!r} was redirected there)"
        raise UrlRefused(f"Refusing to fetch {shown}{tail}: credentials in the URL are not accepted")
    raw_host = parts.hostname
    if not raw_host:
        raise UrlRefused(f"Refusing to fetch {where}: the URL has no host")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        raise UrlRefused(f"Refusing to fetch {where}: invalid port") from None
    if "%" in raw_host:
        raise UrlRefused(f"Refusing to fetch {where}: percent signs (zone ids, escapes) are not allowed in the host")
    if "[" in parts.netloc:  # IPv6 literal
        try:
            host = str(ipaddress.IPv6Address(raw_host))
        except ValueError:
            raise UrlRefused(f"Refusing to fetch {where}: {raw_host!r} is not a valid IPv6 literal") from None
    else:
        try:
            host = raw_host.encode("idna").decode("ascii") if not raw_host.isascii() else raw_host
        except UnicodeError:
            raise UrlRefused(f"Refusing to fetch {where}: host {raw_host!r} is not a valid host name") from None
        if not _HOST_CHARS.match(host):
            raise UrlRefused(f"Refusing to fetch {where}: host {raw_host!r} is not a valid host name")
    path = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    final = urlunsplit((scheme, parts.netloc, parts.path or "/", parts.query, ""))
    return _Target(url=final, scheme=scheme, host=host.lower().rstrip("."), port=port, request_path=path)


# ------------------------------------------------------------------ resolution and vetting

def _resolve_and_vet(
    target: _Target,
    *,
    origin: str | None,
    resolver: Resolver,
    allow_private: bool,
    treat_as_public: frozenset[IPAddress],
) -> list[Pinned]:
    """Resolve the host once; return the (family, sockaddr) list to connect to, all vetted."""
    host = target.host
    with netguard.lookup_permit(host):
        try:
            infos = resolver(host, target.port, 0, socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise UrlFetchFailed(f"Could not resolve host {host!r}: {exc.strerror or exc}") from None
        except PermissionError as exc:
            raise UrlIngestDisabled(f"URL ingestion is disabled: {exc}") from None
        except (OSError, UnicodeError) as exc:
            raise UrlFetchFailed(f"Could not resolve host {host!r}: {exc}") from None
    addresses: list[Pinned] = []
    seen: set[SockAddr] = set()
    for family, _type, _proto, _canon, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6) or sockaddr in seen:
            continue
        seen.add(sockaddr)
        addresses.append((family, sockaddr))
    if not addresses:
        raise UrlFetchFailed(f"Could not resolve host {host!r}: no IPv4 or IPv6 address")
    if allow_private:
        return addresses
    for _family, sockaddr in addresses:
        ip = ipaddress.ip_address(sockaddr[0])
        if ip in treat_as_public:
            continue
        reason = address_refusal(ip)
        if reason:
            resolved = "" if host == str(ip) else f" (resolves to {ip})"
            tail = "" if origin is None else f"; the fetch of {origin!r} was redirected to {target.url!r}"
            raise UrlRefused(
                f"Refusing to fetch from host {host!r}{resolved}: {reason}{tail}",
                hint="Set ALLOW_PRIVATE_URLS=1 only if fetching an internal host is intended; "
                "otherwise treat the URL as untrusted.",
            )
    return addresses


# ------------------------------------------------------------------ pinned connections

def _connect_pinned(addresses: Iterable[Pinned], timeout: float | None) -> socket.socket:
    last: OSError | None = None
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            with netguard.fetch_permit(sockaddr[0], sockaddr[1]):
                sock.connect(sockaddr)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
            if isinstance(exc, (TimeoutError, PermissionError)):
                break
    assert last is not None
    raise last


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """HTTPConnection whose socket goes to the vetted addresses, never to a new lookup."""

    def __init__(self, host: str, port: int, *, addresses: list[Pinned], timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._addresses = addresses

    def connect(self) -> None:
        sys.audit("http.client.connect", self, self.host, self.port)
        self.sock = _connect_pinned(self._addresses, self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to the vetted addresses; SNI and certificate checked against the URL's host."""

    def __init__(
        self, host: str, port: int, *, addresses: list[Pinned], timeout: float,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self._tls = context or ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self._tls)
        self._addresses = addresses

    def connect(self) -> None:
        sys.audit("http.client.connect", self, self.host, self.port)
        sock = _connect_pinned(self._addresses, self.timeout)
        try:
            self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


# ------------------------------------------------------------------ reading

def _remaining(deadline: float, timeout_s: float, where: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise UrlTimeout(f"Fetching {where} took longer than {timeout_s:g} s")
    return left


def _read_body(
    resp: http.client.HTTPResponse, sock: socket.socket, *, deadline: float, timeout_s: float,
    max_bytes: int, where: str,
) -> bytes:
    too_large = f"Refusing {where}: the response is larger than the {max_bytes}-byte limit"
    length = resp.getheader("Content-Length")
    if length and length.strip().isdigit() and int(length) > max_bytes:
        raise UrlTooLarge(f"{too_large} (Content-Length {int(length)})")
    encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        inflater = zlib.decompressobj(47)  # gzip or zlib header, detected
    elif encoding in ("identity", ""):
        inflater = None
    else:
        raise UrlFetchFailed(f"Fetching {where}: unsupported Content-Encoding {encoding!r}")
    out = bytearray()
    while True:
        sock.settimeout(_remaining(deadline, timeout_s, where))
        chunk = resp.read1(64 * 1024)
        if not chunk:
            break
        if inflater is not None:
            chunk = inflater.decompress(chunk, max_bytes + 1 - len(out))
            if inflater.unconsumed_tail:
                raise UrlTooLarge(too_large)
        out += chunk
        if len(out) > max_bytes:
            raise UrlTooLarge(too_large)
    _remaining(deadline, timeout_s, where)
    return bytes(out)


def _one_hop(
    target: _Target, addresses: list[Pinned], *, deadline: float, timeout_s: float,
    max_bytes: int, where: str, tls_context: ssl.SSLContext | None,
) -> tuple[int, str, str | None, str, str | None, bytes]:
    """GET one URL; return (status, reason, location, content_type, charset, body)."""
    left = _remaining(deadline, timeout_s, where)
    if target.scheme == "https":
        conn: http.client.HTTPConnection = _PinnedHTTPSConnection(
            target.host, target.port, addresses=addresses, timeout=left, context=tls_context
        )
    else:
        conn = _PinnedHTTPConnection(target.host, target.port, addresses=addresses, timeout=left)
    try:
        conn.putrequest("GET", target.request_path, skip_accept_encoding=True)
        conn.putheader("User-Agent", USER_AGENT)
        conn.putheader("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        conn.putheader("Accept-Encoding", "gzip, deflate, identity")
        conn.putheader("Connection", "close")
        conn.endheaders()
        sock = conn.sock
        assert sock is not None
        sock.settimeout(_remaining(deadline, timeout_s, where))
        resp = conn.getresponse()
        status = resp.status
        if status in _REDIRECT_STATUSES:
            return status, resp.reason, resp.getheader("Location"), "", None, b""
        if not 200 <= status < 300:
            raise UrlFetchFailed(f"Fetching {where} failed: HTTP {status} {resp.reason}".rstrip())
        ctype = resp.headers.get_content_type() if resp.getheader("Content-Type") else ""
        charset = resp.headers.get_content_charset()
        body = _read_body(resp, sock, deadline=deadline, timeout_s=timeout_s, max_bytes=max_bytes, where=where)
        return status, resp.reason, None, ctype, charset, body
    except ApplianceError:
        raise
    except TimeoutError:
        raise UrlTimeout(f"Fetching {where} took longer than {timeout_s:g} s") from None
    except ssl.SSLCertVerificationError as exc:
        raise UrlFetchFailed(f"Fetching {where} failed: TLS certificate not valid for {target.host!r} "
                             f"({exc.verify_message})") from None
    except PermissionError as exc:
        raise UrlIngestDisabled(f"URL ingestion is disabled: {exc}") from None
    except (OSError, http.client.HTTPException, zlib.error) as exc:
        raise UrlFetchFailed(f"Fetching {where} failed: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def fetch_url(
    url: str,
    *,
    allow_private: bool,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_redirects: int = MAX_REDIRECTS,
    resolver: Resolver = socket.getaddrinfo,
    treat_as_public: Iterable[str] = (),
    tls_context: ssl.SSLContext | None = None,
) -> FetchedPage:
    """Fetch `url` (http/https) with every hop vetted and pinned; see the module docstring.

    Raises UrlRefused (scheme, credentials, blocked address, UrlTooLarge),
    UrlFetchFailed (resolution, connection, HTTP status, too many redirects; UrlTimeout)
    and UrlIngestDisabled when the egress guard does not allow URL fetches.

    `treat_as_public` exists for tests only: addresses (the loopback test servers) that
    the address check accepts as public. Production callers never pass it.
    `tls_context` lets tests trust a private CA; the default verifies against the
    system store.
    """
    if not netguard.fetch_allowed():
        raise UrlIngestDisabled("URL ingestion is disabled: ALLOW_URL_INGEST is off")
    public = frozenset(ipaddress.ip_address(a) for a in treat_as_public)
    deadline = time.monotonic() + timeout_s
    current, origin = url, None
    redirects = 0
    while True:
        target = _parse(current, origin)
        where = _describe(target.url, origin)
        addresses = _resolve_and_vet(
            target, origin=origin, resolver=resolver, allow_private=allow_private, treat_as_public=public
        )
        status, reason, location, ctype, charset, body = _one_hop(
            target, addresses, deadline=deadline, timeout_s=timeout_s, max_bytes=max_bytes,
            where=where, tls_context=tls_context,
        )
        if status not in _REDIRECT_STATUSES:
            return FetchedPage(url=url, final_url=target.url, content_type=ctype, body=body, charset=charset)
        if not location:
            raise UrlFetchFailed(f"Fetching {where} failed: HTTP {status} {reason} without a Location")
        nxt = urljoin(target.url, location.strip())
        if redirects >= max_redirects:
            raise UrlFetchFailed(
                f"Fetching {url!r} failed: more than {max_redirects} redirects (the last one, from "
                f"{target.url!r}, pointed to {nxt!r})"
            )
        redirects += 1
        current, origin = nxt, url


# ------------------------------------------------------------------ conversion

_TYPE_EXTENSIONS: dict[str, str] = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/x-markdown": ".md",
    "text/csv": ".csv",
    "application/pdf": ".pdf",
    "application/json": ".json",
    "application/x-ipynb+json": ".ipynb",
    "application/epub+zip": ".epub",
    "application/vnd.ms-excel": ".xls",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ".xlsx",
}
_GENERIC_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/download"})


def _extension(page: FetchedPage) -> str:
    from appliance.ingest.convert import SUPPORTED_EXTENSIONS

    ext = _TYPE_EXTENSIONS.get(page.content_type)
    if ext:
        return ext
    suffix = PurePosixPath(unquote(urlsplit(page.final_url).path)).suffix.lower()
    if page.content_type in _GENERIC_TYPES and suffix in SUPPORTED_EXTENSIONS:
        return suffix
    raise UnsupportedFile(
        f"{page.final_url}: content type {page.content_type or '(none)'} is not a supported format"
    )


def _known_codec(name: str | None) -> str | None:
    if not name:
        return None
    import codecs

    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def _file_stem(page: FetchedPage) -> str:
    parts = urlsplit(page.final_url)
    stem = PurePosixPath(unquote(parts.path)).stem or (parts.hostname or "page")
    stem = re.sub(r"[^\w.-]+", "-", stem).strip(".-")[:80]
    return stem or "page"


def page_to_converted(page: FetchedPage, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Converted:
    """Convert a fetched body with the converter its Content-Type (or URL suffix) names."""
    from appliance.ingest.convert import convert_data, to_markdown

    ext = _extension(page)
    charset = _known_codec(page.charset)
    meta = {"url": page.final_url, "contentType": page.content_type}
    formats: dict[str, Literal["text", "markdown", "html"]] = {".html": "html", ".txt": "text", ".md": "markdown"}
    fmt = formats.get(ext)
    if fmt is not None and charset is not None:
        # The server named the charset: it wins over a <meta> in the page. The BOM makes
        # the HTML converter take the text as the UTF-8 it now is.
        text = page.body.decode(charset, errors="replace")
        if fmt == "html":
            text = "\ufeff" + text.lstrip("\ufeff")
        conv = convert_data(text, fmt)
    else:
        # No charset from the server (or a binary format): the file converter sniffs it.
        with tempfile.TemporaryDirectory(prefix="minirag-url-") as tmp:
            path = Path(tmp) / f"{_file_stem(page)}{ext}"
            path.write_bytes(page.body)
            try:
                conv = to_markdown(path, ocr=None, max_file_size=max(max_bytes, len(page.body)))
            except ApplianceError as exc:
                raise _renamed(exc, str(path), page.final_url) from None
    return Converted(
        markdown=conv.markdown,
        title=conv.title,
        ocr_engine=conv.ocr_engine,
        has_lines=conv.has_lines,
        metadata={**conv.metadata, **meta},
    )


def _renamed(exc: ApplianceError, old: str, new: str) -> ApplianceError:
    """The same error with the temporary file's path replaced by the URL."""
    try:
        return type(exc)(str(exc).replace(old, new), exc.hint)
    except Exception:  # noqa: BLE001 - a subclass built from other arguments: keep the original
        return exc


__all__ = [
    "FetchedPage",
    "UrlFetchFailed",
    "UrlTimeout",
    "UrlTooLarge",
    "address_refusal",
    "fetch_url",
    "page_to_converted",
]
