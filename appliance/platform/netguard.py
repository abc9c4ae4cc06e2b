"""Egress guard: no outbound network traffic from Python code, except the URL fetcher's.

`install()` adds a `sys.addaudithook` hook that turns every outbound socket operation
into `PermissionError`:

* `socket.connect` (also raised by `connect_ex`), `socket.sendto`, `socket.sendmsg`
  with an explicit destination: refused unless the socket is AF_UNIX / AF_NETLINK
  (local IPC, the kernel) or the destination is the one the current thread holds a
  `fetch_permit` for. Loopback is refused too: a library talking to a local proxy or
  agent is still traffic we did not ask for.
* `socket.getaddrinfo`, `socket.gethostbyname(_ex)`, `socket.gethostbyaddr`,
  `socket.getnameinfo`: name lookups are themselves a leak (DNS), so they are refused
  unless the current thread holds a `lookup_permit` for that exact name. A strict IP
  literal (or None, for a passive/bind lookup) needs no lookup and is let through, which
  keeps `socket.create_server("127.0.0.1", ...)` and uvicorn's bind working.
* `socket.bind`, `listen`, `accept` are not egress and are never refused, so the MCP
  streamable-HTTP daemon can serve on a local port.

Permits are thread-local and only granted when `install(allow_fetch=True)`; with URL
ingestion off, `fetch_permit`/`lookup_permit` grant nothing and the fetcher's own
connection is refused like any other. The one other opening is `permit_cluster`: a
`sync --ray ADDRESS` names a Ray cluster, and its nodes may then be reached (by name and
address, any port, from any thread: Ray's driver talks to the head's GCS and to every
node's raylet and object manager on ports the cluster hands out).

Limits: an audit hook only sees what goes through CPython's socket module. Native code
that opens its own sockets (a Rust or C++ extension: lancedb's object-store client for
remote URIs, onnxruntime) is not covered; the appliance keeps those local by
configuration (a local DB_PATH, baked models) and by the container having no network.
`ctypes` calls to libc `connect()` are not covered either. onnxruntime's own telemetry
is switched off by ORT_DISABLE_TELEMETRY (OFFLINE_ENV), set when `appliance` is imported;
scripts/egress_check.py watches a whole session from outside the process.

Audit hooks cannot be removed, so tests exercise `install` in a subprocess.
"""
from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
import threading
from collections.abc import Iterable, Iterator

_REFUSAL = (
    "network access is disabled in this appliance: {what} was refused "
    "(only an explicit, opted-in URL fetch may leave the machine)"
)

# Address families that cannot reach another machine.
_LOCAL_FAMILIES: frozenset[int] = frozenset(
    f for f in (getattr(socket, "AF_UNIX", None), getattr(socket, "AF_NETLINK", None)) if f is not None
)

_LOOKUP_EVENTS = frozenset(
    {
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
    }
)
_SEND_EVENTS = frozenset({"socket.connect", "socket.sendto", "socket.sendmsg"})

_state_lock = threading.Lock()
_installed = False
_allow_fetch = False
_local = threading.local()
_cluster_ips: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address] = frozenset()
_cluster_names: frozenset[str] = frozenset()


# ------------------------------------------------------------------ offline switches

OFFLINE_ENV: dict[str, str] = {
    # onnxruntime 1.32's 1DS telemetry: from its native code, `import onnxruntime` alone
    # starts an uploader that resolves mobile.events.data.microsoft.com and opens TLS
    # to it a few seconds later, then every few seconds (scripts/egress_check.py saw 10
    # lookups and 5 connects in a 60 s server session). Read when the library loads, so
    # it must be in the environment before anything imports onnxruntime: the appliance
    # package sets it on import (appliance/__init__.py). `disable_telemetry_events()`
    # called after the import does not stop it (measured).
    "ORT_DISABLE_TELEMETRY": "1",
    # huggingface_hub (fastembed downloads through it): no Hub calls, use the cache only.
    # Read at import time by huggingface_hub.constants, so set before importing it.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    # huggingface_hub's telemetry opt-outs (it honours all three).
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    # The hub CLI's PyPI "new version available" check.
    "HF_HUB_DISABLE_UPDATE_CHECK": "1",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    # Ray (the [cluster] extra, `sync --ray`): usage statistics to its makers from clusters
    # that `ray start` begins (ray.init of a local cluster keeps them off already).
    "RAY_USAGE_STATS_ENABLED": "0",
}
"""Switches that keep libraries off the network (see `offline_env`)."""


def offline_env() -> dict[str, str]:
    """The environment variables that tell our libraries to stay offline.

    What the installed libraries were found to do (onnxruntime 1.32, lancedb 0.40,
    fastembed 0.9, markitdown 0.1.9, huggingface_hub 1.x); scripts/egress_check.py
    proves the result from outside the process:

    * onnxruntime (embedder; magika in the conversion workers): 1DS telemetry over
      libcurl in native code, invisible to the egress guard, started by the import;
      ORT_DISABLE_TELEMETRY=1 switches it off. It also keeps quiet when it sees a CI
      marker (CI=true, GITHUB_ACTIONS, ...), which is why CI never showed it.

    * fastembed: downloads a model from the Hugging Face Hub (or a GCS URL through
      `requests`) only when it is missing from the cache; honours HF_HUB_OFFLINE by
      switching to `local_files_only`. No telemetry.
    * huggingface_hub: Hub API calls, an implicit token lookup, a CLI update check and
      telemetry pings; HF_HUB_OFFLINE / DO_NOT_TRACK / HF_HUB_DISABLE_TELEMETRY turn
      them off.
    * lancedb: no telemetry in the Python package; `lancedb.otel` only forwards metrics
      to a MeterProvider the caller supplies. Network I/O happens only for remote URIs
      (db://, s3://, gs://, az://), in native code. No environment switch exists.
    * markitdown: network only in `convert_uri`/`convert_url` (requests), the YouTube
      and Bing converters and the opt-in Azure Document Intelligence / Content
      Understanding converters; the appliance calls individual converters on local
      bytes and never those. Magika runs a bundled local model. No switch exists.
    """
    return dict(OFFLINE_ENV)


def apply_offline_env() -> None:
    """Set `offline_env()` in os.environ, keeping values the operator already set."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


# ------------------------------------------------------------------ permits

def _permits() -> list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    p = getattr(_local, "connect", None)
    if p is None:
        p = _local.connect = []
    return p


def _lookups() -> list[str]:
    p = getattr(_local, "lookup", None)
    if p is None:
        p = _local.lookup = []
    return p


@contextlib.contextmanager
def fetch_permit(vetted_ip: str, port: int) -> Iterator[None]:
    """Let this thread connect to exactly (vetted_ip, port) while inside the block.

    Grants nothing unless the guard was installed with allow_fetch=True (and is a no-op
    when no guard is installed).
    """
    entry = (ipaddress.ip_address(vetted_ip), int(port))
    permits = _permits()
    permits.append(entry)
    try:
        yield
    finally:
        permits.remove(entry)


@contextlib.contextmanager
def lookup_permit(host: str) -> Iterator[None]:
    """Let this thread resolve exactly `host` (the fetcher's own resolution step)."""
    name = _norm_name(host)
    lookups = _lookups()
    lookups.append(name)
    try:
        yield
    finally:
        lookups.remove(name)


def permit_cluster(hosts: Iterable[str]) -> None:
    """Let the process reach these hosts (IP literals or names) from now on, on any port.

    Only `sync --ray ADDRESS` calls it, with the address the user gave and then the nodes the
    cluster reports: asking for a cluster is the opt-in, as ALLOW_URL_INGEST is for a fetch.
    A name is resolved here, once (a name that does not resolve adds nothing: the connection
    to it then fails on its own, naming it)."""
    global _cluster_ips, _cluster_names
    ips, names = set(_cluster_ips), set(_cluster_names)
    for host in (h.strip("[]") for h in hosts):
        if _is_ip_literal(host):
            ips.add(ipaddress.ip_address(host))
            continue
        names.add(_norm_name(host))
        with _state_lock:
            _cluster_names = frozenset(names)  # before the lookup, which the hook would refuse otherwise
        with contextlib.suppress(OSError):
            ips.update(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in socket.getaddrinfo(host, None))
    with _state_lock:
        _cluster_ips = frozenset(ips)


def _in_cluster(address: object) -> bool:
    if not _cluster_ips or not isinstance(address, tuple) or len(address) < 2:
        return False
    try:
        return ipaddress.ip_address(address[0]) in _cluster_ips
    except (ValueError, TypeError):
        return False


# ------------------------------------------------------------------ the hook

def _norm_name(host: object) -> str:
    if isinstance(host, (bytes, bytearray)):
        host = bytes(host).decode("ascii", "replace")
    return str(host).rstrip(".").lower()


def _is_ip_literal(host: object) -> bool:
    if isinstance(host, (bytes, bytearray)):
        host = bytes(host).decode("ascii", "replace")
    try:
        ipaddress.ip_address(str(host))
    except ValueError:
        return False
    return True


def _permitted_destination(address: object) -> bool:
    if not _allow_fetch or not isinstance(address, tuple) or len(address) < 2:
        return False
    permits = getattr(_local, "connect", None)
    if not permits:
        return False
    try:
        ip = ipaddress.ip_address(address[0])
        port = int(address[1])
    except (ValueError, TypeError):
        return False
    return (ip, port) in permits


def _refuse(what: str) -> None:
    raise PermissionError(_REFUSAL.format(what=what))


def _hook(event: str, args: tuple[object, ...]) -> None:
    if not event.startswith("socket."):
        return
    if event in _SEND_EVENTS:
        sock, address = args[0], args[1]
        if address is None:  # sendmsg on an already connected (or accepted) socket
            return
        if getattr(sock, "family", None) in _LOCAL_FAMILIES:
            return
        if _permitted_destination(address) or _in_cluster(address):
            return
        _refuse(f"{event} to {address!r}")
    elif event in _LOOKUP_EVENTS:
        host = args[0]
        if event == "socket.getnameinfo":
            _refuse(f"reverse lookup of {host!r}")  # always a DNS query by default
        if event == "socket.gethostbyaddr":
            _refuse(f"reverse lookup of {host!r}")
        if host is None or _is_ip_literal(host):
            return
        if _allow_fetch and _norm_name(host) in getattr(_local, "lookup", ()):
            return
        if _norm_name(host) in _cluster_names:
            return
        _refuse(f"name lookup of {host!r}")


def install(allow_fetch: bool) -> None:
    """Install the egress guard (once per process; later calls only widen nothing).

    `allow_fetch` is ALLOW_URL_INGEST: whether `fetch_permit`/`lookup_permit` grant
    anything. A second call is harmless; it may turn allow_fetch off but never on, so
    a guard installed strict stays strict.
    """
    global _installed, _allow_fetch
    with _state_lock:
        if _installed:
            _allow_fetch = _allow_fetch and bool(allow_fetch)
            return
        _allow_fetch = bool(allow_fetch)
        sys.addaudithook(_hook)
        _installed = True


def installed() -> bool:
    return _installed


def fetch_allowed() -> bool:
    """True unless a guard is installed with URL ingestion off."""
    return not _installed or _allow_fetch


__all__ = [
    "OFFLINE_ENV",
    "apply_offline_env",
    "fetch_allowed",
    "fetch_permit",
    "install",
    "installed",
    "lookup_permit",
    "offline_env",
    "permit_cluster",
]
