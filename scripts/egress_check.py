#!/usr/bin/env python3
"""Prove from outside the process that an appliance session sends nothing off the machine.

Usage:
  egress_check.py [--serve] [--json] [--linger S] [--models-dir DIR] [--docs DIR]
  egress_check.py [--json] -- COMMAND [ARG...]
  egress_check.py --sinkhole ADDR|auto     (the DNS logger of tests/docker/test_egress.py)

The command runs inside a fresh network namespace plus a mount namespace
(`unshare --net --mount`), where this script (as root) sets up:

* `lo` up, and `local 0.0.0.0/0` / `local ::/0` routes on it: every address, public
  IP literals included, is an address of this namespace, so nothing can leave it and
  every connect lands on `lo`, where it is seen;
* its own /etc/resolv.conf (bind-mounted: `nameserver 127.0.0.1`) and a two-line
  /etc/hosts; a DNS server in this script (UDP and TCP on 127.0.0.1:53) logs every
  query and answers A with 127.0.0.2 and AAAA with ::1, so a client that looks a name
  up goes on to connect;
* listeners on every address for TCP 80 and 443 that accept, log the TLS SNI or the
  HTTP Host and hang up;
* a packet socket on `lo` that counts every TCP SYN and UDP datagram sent (any port),
  so a connect to a port nobody listens on is counted too.

The default command is a short appliance session in a fresh temp dir: `minirag sync`
over two sample documents, `minirag query`, `minirag status`. `--serve` then runs
`minirag serve` on stdio over the same index: `initialize`, one
`tools/call query_documents`, `--hold` seconds idle (a server lives long: what a
library does a while after start-up shows), then stdin is closed. The children get a fresh HOME and
XDG_CACHE_HOME (as a new container has) and run there, so `-m appliance` is the
code that PYTHONPATH (or the installed package) names, not the current directory's; and neither CI markers
nor the offline switches of the caller's environment (`--keep-env` keeps them). After the command ends the namespace is
watched `--linger` seconds more.

Prints the counts, the names asked and every connection; `--json` prints one JSON
object. Exit status: 0 when nothing was sent (no DNS query, no TCP connect, no UDP
datagram), 1 when something was, 2 when the check could not run (not root, no
unshare, the command failed).

Nothing leaves the machine: the namespace has no interface but `lo`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SINK_V4: str = "127.0.0.2"
SINK_V6: str | None = "::1"  # None: AAAA gets an empty answer
DNS_ADDR = ("127.0.0.1", 53)
SINK_PORTS = (80, 443)
QUERY = "how often are backups verified"
SAMPLE_DOCS = ("backup-policy.md", "release-checklist.txt")
# Taken out of the children's environment unless --keep-env: onnxruntime 1.32 sends no
# telemetry when it sees one of the CI markers (measured: CI=true alone silences it), so
# a check run by CI would prove nothing; and the offline switches, so that what is
# proven is that the appliance sets them itself, not that the caller's shell did.
CI_MARKERS = ("CI", "TF_BUILD", "GITHUB_ACTIONS", "GITLAB_CI", "CIRCLECI", "TRAVIS", "JENKINS_URL",
              "CODEBUILD_BUILD_ID", "BUILDKITE", "TEAMCITY_VERSION", "APPVEYOR", "BITBUCKET_BUILD_NUMBER",
              "ORT_RUNNING_UNIT_TESTS")
OFFLINE_SWITCHES = ("ORT_DISABLE_TELEMETRY", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE",
                    "HF_HUB_DISABLE_TELEMETRY", "DISABLE_TELEMETRY", "DO_NOT_TRACK",
                    "HF_HUB_DISABLE_UPDATE_CHECK", "HF_HUB_DISABLE_IMPLICIT_TOKEN")


# ------------------------------------------------------------------ DNS sinkhole

def parse_question(msg: bytes) -> tuple[str, int, int]:
    """(name, qtype, offset after the question) of a DNS query."""
    labels, i = [], 12
    while True:
        n = msg[i]
        if n == 0:
            i += 1
            break
        if n & 0xC0:  # compression in a question: not sent by resolvers
            raise ValueError("compressed question")
        labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype, _qclass = struct.unpack("!HH", msg[i:i + 4])
    return ".".join(labels), qtype, i + 4


def answer(msg: bytes) -> bytes:
    """A reply pointing A at SINK_V4 and AAAA at SINK_V6 (TTL 0: every lookup is asked again)."""
    _name, qtype, end = parse_question(msg)
    rdata = {1: socket.inet_pton(socket.AF_INET, SINK_V4),
             28: socket.inet_pton(socket.AF_INET6, SINK_V6) if SINK_V6 else None}.get(qtype)
    flags = 0x8180 | (struct.unpack("!H", msg[2:4])[0] & 0x0100)
    header = msg[:2] + struct.pack("!HHHHH", flags, 1, 1 if rdata else 0, 0, 0)
    out = header + msg[12:end]
    if rdata:
        out += struct.pack("!HHHIH", 0xC00C, qtype, 1, 0, len(rdata)) + rdata
    return out


class Log:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.dns: list[dict[str, Any]] = []
        self.accepted: list[dict[str, Any]] = []
        self.syn: list[dict[str, Any]] = []
        self.udp: list[dict[str, Any]] = []
        self.errors: list[str] = []

    def add(self, kind: str, entry: dict[str, Any]) -> None:
        entry["t"] = round(time.monotonic() - T0, 3)
        with self.lock:
            getattr(self, kind).append(entry)


T0 = time.monotonic()
QTYPES = {1: "A", 28: "AAAA", 5: "CNAME", 12: "PTR", 15: "MX", 16: "TXT", 33: "SRV", 65: "HTTPS", 64: "SVCB"}


def _log_query(log: Log, msg: bytes, transport: str) -> bytes | None:
    try:
        name, qtype, _ = parse_question(msg)
    except (ValueError, IndexError, struct.error):
        log.add("dns", {"name": "?", "type": "unparsable", "via": transport})
        return None
    log.add("dns", {"name": name, "type": QTYPES.get(qtype, str(qtype)), "via": transport})
    return answer(msg)


def serve_dns_udp(log: Log, stop: threading.Event, addr: tuple[str, int] = DNS_ADDR) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(addr)
    s.settimeout(0.2)
    while not stop.is_set():
        try:
            msg, peer = s.recvfrom(4096)
        except TimeoutError:
            continue
        reply = _log_query(log, msg, "udp")
        if reply:
            s.sendto(reply, peer)
    s.close()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            raise ConnectionError("closed")
        buf += part
    return buf


def _dns_tcp_conn(log: Log, conn: socket.socket) -> None:
    with conn:
        conn.settimeout(5)
        try:
            while True:
                (n,) = struct.unpack("!H", _recv_exact(conn, 2))
                reply = _log_query(log, _recv_exact(conn, n), "tcp")
                if reply is None:
                    return
                conn.sendall(struct.pack("!H", len(reply)) + reply)
        except (OSError, ConnectionError, struct.error):
            return


# ------------------------------------------------------------------ TCP sinkhole

def sni_or_host(data: bytes) -> str | None:
    """The server name a TLS ClientHello or an HTTP request asks for."""
    if data[:1] == b"\x16" and len(data) > 43:
        try:
            i = 5 + 4 + 2 + 32  # record header, handshake header, version, random
            i += 1 + data[i]  # session id
            i += 2 + struct.unpack("!H", data[i:i + 2])[0]  # cipher suites
            i += 1 + data[i]  # compression methods
            end = i + 2 + struct.unpack("!H", data[i:i + 2])[0]
            i += 2
            while i + 4 <= end:
                etype, elen = struct.unpack("!HH", data[i:i + 4])
                if etype == 0:  # server_name: list length, type, name length, name
                    n = struct.unpack("!H", data[i + 7:i + 9])[0]
                    return "tls:" + data[i + 9:i + 9 + n].decode("ascii", "replace")
                i += 4 + elen
        except (IndexError, struct.error):
            return "tls:?"
        return "tls:"
    for line in data.split(b"\r\n")[1:]:
        if line.lower().startswith(b"host:"):
            return "http:" + line[5:].strip().decode("ascii", "replace")
    return None


def _sink_conn(log: Log, conn: socket.socket, peer: Any) -> None:
    with conn:
        local = conn.getsockname()
        conn.settimeout(2)
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        log.add("accepted", {"to": f"{local[0]}:{local[1]}", "from": f"{peer[0]}:{peer[1]}",
                             "bytes": len(data), "server_name": sni_or_host(data)})


def serve_tcp(log: Log, stop: threading.Event, family: int, addr: tuple, handler) -> None:
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind(addr)
        s.listen(64)
    except OSError as exc:
        log.errors.append(f"cannot listen on {addr}: {exc}")
        return
    s.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, peer = s.accept()
        except TimeoutError:
            continue
        threading.Thread(target=handler, args=(log, conn, peer), daemon=True).start()
    s.close()


# ------------------------------------------------------------------ packet counter on lo

def _ip_header(frame: bytes) -> tuple[int, str, str, bytes] | None:
    """(protocol, src, dst, transport bytes) of an Ethernet frame on lo."""
    ethertype = struct.unpack("!H", frame[12:14])[0]
    p = frame[14:]
    if ethertype == 0x0800:
        ihl = (p[0] & 0x0F) * 4
        return p[9], socket.inet_ntop(socket.AF_INET, p[12:16]), socket.inet_ntop(socket.AF_INET, p[16:20]), p[ihl:]
    if ethertype == 0x86DD:  # extension headers are not followed: TCP/UDP come first here
        return p[6], socket.inet_ntop(socket.AF_INET6, p[8:24]), socket.inet_ntop(socket.AF_INET6, p[24:40]), p[40:]
    return None


def sniff_lo(log: Log, stop: threading.Event, ready: threading.Event) -> None:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    s.bind(("lo", 0))
    s.settimeout(0.2)
    ready.set()
    while not stop.is_set():
        try:
            frame, addr = s.recvfrom(65535)
        except TimeoutError:
            continue
        if addr[2] != socket.PACKET_OUTGOING:  # each packet on lo is seen going out and coming in
            continue
        parsed = _ip_header(frame)
        if parsed is None:
            continue
        proto, src, dst, t = parsed
        if proto == 6 and len(t) >= 14:
            sport, dport = struct.unpack("!HH", t[:4])
            flags = t[13]
            if flags & 0x02 and not flags & 0x10:  # SYN without ACK: a connect
                log.add("syn", {"to": f"{dst}:{dport}", "from": f"{src}:{sport}"})
        elif proto == 17 and len(t) >= 8:
            sport, dport = struct.unpack("!HH", t[:4])
            if sport == DNS_ADDR[1] and src == DNS_ADDR[0]:
                continue  # our own DNS answers
            log.add("udp", {"to": f"{dst}:{dport}", "from": f"{src}:{sport}", "bytes": len(t) - 8})
    s.close()


# ------------------------------------------------------------------ namespace set-up

def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def setup_namespace(tmp: Path, log: Log) -> None:
    _run("ip", "link", "set", "lo", "up")
    _run("ip", "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "local")
    try:
        _run("ip", "-6", "route", "add", "local", "::/0", "dev", "lo", "table", "local")
    except subprocess.CalledProcessError as exc:
        log.errors.append(f"no IPv6 catch-all route: {exc.stderr.decode(errors='replace').strip()}")
    _run("mount", "--make-rprivate", "/")
    resolv, hosts = tmp / "resolv.conf", tmp / "hosts"
    resolv.write_text(f"nameserver {DNS_ADDR[0]}\n")
    # localhost and this machine's own name, as a container's /etc/hosts has them
    hosts.write_text(f"127.0.0.1 localhost\n127.0.1.1 {socket.gethostname()}\n"
                     "::1 localhost ip6-localhost ip6-loopback\n")
    _run("mount", "--bind", str(resolv), "/etc/resolv.conf")
    _run("mount", "--bind", str(hosts), "/etc/hosts")


def start_watchers(log: Log, stop: threading.Event) -> list[threading.Thread]:
    ready = threading.Event()
    targets: list[tuple] = [(sniff_lo, (log, stop, ready)), (serve_dns_udp, (log, stop)),
                            (serve_tcp, (log, stop, socket.AF_INET, DNS_ADDR, _dns_tcp_conn))]
    for port in SINK_PORTS:
        targets.append((serve_tcp, (log, stop, socket.AF_INET, ("0.0.0.0", port), _sink_conn)))
        targets.append((serve_tcp, (log, stop, socket.AF_INET6, ("::", port), _sink_conn)))
    threads = [threading.Thread(target=f, args=a, daemon=True) for f, a in targets]
    for t in threads:
        t.start()
    ready.wait(5)
    time.sleep(0.3)  # the listeners bind
    return threads


# ------------------------------------------------------------------ the session under watch

def minirag(*args: str) -> list[str]:
    return [sys.executable, "-m", "appliance", *args]


def _mcp_session(cmd: list[str], env: dict[str, str], timeout: float, hold: float) -> dict[str, Any]:
    """initialize, one tools/call query_documents, `hold` seconds idle, close stdin; replies checked."""
    t = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         cwd=env["HOME"])
    assert p.stdin and p.stdout
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "egress-check", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "query_documents", "arguments": {"query": QUERY, "topK": 3}}},
    ]
    replies: dict[int, Any] = {}
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        for frame in frames:
            p.stdin.write((json.dumps(frame) + "\n").encode())
            p.stdin.flush()
            if "id" not in frame:
                continue
            while frame["id"] not in replies:
                line = p.stdout.readline()
                if not line:
                    break
                msg = json.loads(line)
                if "id" in msg:
                    replies[msg["id"]] = msg
            if frame["id"] not in replies:
                break
        time.sleep(hold)  # a server stays up: what a library does a while after start is seen too
        p.stdin.close()
        p.stdout.read()
        rc = p.wait()
        err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    finally:
        timer.cancel()
    ok = rc == 0 and all(i in replies and "result" in replies[i] and not replies[i]["result"].get("isError")
                         for i in (1, 2))
    return {"argv": cmd, "rc": rc, "ok": ok, "seconds": round(time.monotonic() - t, 2),
            "stderr_tail": "" if ok else err[-2000:], "mcp_replies": sorted(replies)}


def _command(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    t = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, env=env, timeout=timeout, cwd=env["HOME"])
        rc, err = p.returncode, p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as exc:
        rc, err = -9, f"timed out after {timeout} s: {exc.stderr!r}"[-2000:]
    return {"argv": cmd, "rc": rc, "ok": rc == 0, "seconds": round(time.monotonic() - t, 2),
            "stderr_tail": "" if rc == 0 else err[-2000:]}


def run_session(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    env = dict(os.environ)
    if not args.keep_env:
        for name in CI_MARKERS + OFFLINE_SWITCHES:
            env.pop(name, None)
    home = tmp / "home"
    (home / ".cache").mkdir(parents=True)
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
    if args.command:
        return [_command(args.command, env, args.timeout)]
    docs, index = tmp / "docs", tmp / "index"
    if args.docs:
        shutil.copytree(args.docs, docs)
    else:
        docs.mkdir()
        for name in SAMPLE_DOCS:
            shutil.copy(ROOT / "samples" / name, docs / name)
    where = ["--base-dir", str(docs), "--db-path", str(index), "--models-dir", str(args.models_dir)]
    steps = [_command(minirag(*cmd, *where), env, args.timeout)
             for cmd in (["sync"], ["query", QUERY], ["status"])]
    if args.serve:
        env.update(BASE_DIR=str(docs), DB_PATH=str(index), MODELS_DIR=str(args.models_dir))
        steps.append(_mcp_session(minirag("serve"), env, args.timeout, args.hold))
    return steps


def inside(args: argparse.Namespace) -> dict[str, Any]:
    log = Log()
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="egress-check-") as tmp_name:
        tmp = Path(tmp_name)
        setup_namespace(tmp, log)
        threads = start_watchers(log, stop)
        steps = run_session(args, tmp)
        time.sleep(args.linger)
        stop.set()
        for t in threads:
            t.join(2)
        cache_files = sorted(str(p.relative_to(tmp / "home")) for p in (tmp / "home").rglob("*") if p.is_file())
    names = Counter(q["name"] for q in log.dns)
    syn = [s for s in log.syn if s["to"] != f"{DNS_ADDR[0]}:{DNS_ADDR[1]}"]
    dns_tcp = len(log.syn) - len(syn)
    udp = [u for u in log.udp if u["to"] != f"{DNS_ADDR[0]}:{DNS_ADDR[1]}"]
    return {
        "ok": not log.dns and not syn and not udp and not log.accepted and not dns_tcp,
        "session_ok": all(s["ok"] for s in steps),
        "dns_queries": len(log.dns),
        "dns_names": dict(sorted(names.items())),
        "dns_log": log.dns,
        "dns_tcp_connects": dns_tcp,
        "tcp_connects": len(syn),
        "tcp_connects_to": dict(Counter(s["to"] for s in syn)),
        "sinkhole_accepted": log.accepted,
        "udp_datagrams": len(udp),
        "udp_to": dict(Counter(u["to"] for u in udp)),
        "files_in_fresh_home": cache_files,
        "steps": steps,
        "linger_s": args.linger,
        "setup_notes": log.errors,
    }


# ------------------------------------------------------------------ sinkhole mode (Docker)

def sinkhole(address: str) -> int:
    """DNS (UDP+TCP :53) answering every A with `address`, listeners on 80/443, until SIGTERM.

    For a container on an internal Docker network that others use as `--dns`; prints
    "ready" on stderr once listening and the JSON report on stdout when stopped.
    """
    import signal

    global SINK_V4, SINK_V6
    if address == "auto":  # this container's address on its network (Docker puts it in /etc/hosts)
        address = socket.gethostbyname(socket.gethostname())
    SINK_V4, SINK_V6 = address, None
    log, stop = Log(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    dns = ("0.0.0.0", 53)
    targets: list[tuple] = [(serve_dns_udp, (log, stop, dns)),
                            (serve_tcp, (log, stop, socket.AF_INET, dns, _dns_tcp_conn))]
    targets += [(serve_tcp, (log, stop, socket.AF_INET, ("0.0.0.0", port), _sink_conn)) for port in SINK_PORTS]
    threads = [threading.Thread(target=f, args=a, daemon=True) for f, a in targets]
    for t in threads:
        t.start()
    time.sleep(0.3)
    print("ready", file=sys.stderr, flush=True)
    while not stop.wait(0.5):
        pass
    for t in threads:
        t.join(2)
    print(json.dumps({"dns_queries": len(log.dns), "dns_names": dict(Counter(q["name"] for q in log.dns)),
                      "dns_log": log.dns, "sinkhole_accepted": log.accepted, "setup_notes": log.errors}), flush=True)
    return 0


# ------------------------------------------------------------------ outside

def can_run() -> str | None:
    """None when this machine can run the check, else why not."""
    if os.geteuid() != 0:
        return "egress_check needs root (unshare --net --mount, mounts, a DNS server on port 53)"
    for tool in ("unshare", "ip", "mount"):
        if shutil.which(tool) is None:
            return f"egress_check needs `{tool}` on PATH"
    probe = subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"unshare --net --mount fails here: {probe.stderr.decode(errors='replace').strip()}"
    return None


def report_text(r: dict[str, Any]) -> str:
    lines = [f"egress: {'NONE' if r['ok'] else 'SEEN'}  (session {'ok' if r['session_ok'] else 'FAILED'})",
             f"  DNS queries: {r['dns_queries']}"]
    lines += [f"    {n}: {c}" for n, c in r["dns_names"].items()]
    lines.append(f"  TCP connects: {r['tcp_connects']}")
    lines += [f"    {to}: {c}" for to, c in r["tcp_connects_to"].items()]
    lines += [f"    accepted {a['to']} from {a['from']} at {a['t']} s: {a['bytes']} bytes, {a['server_name']}"
              for a in r["sinkhole_accepted"]]
    lines.append(f"  UDP datagrams (not DNS): {r['udp_datagrams']}")
    lines += [f"    {to}: {c}" for to, c in r["udp_to"].items()]
    for s in r["steps"]:
        lines.append(f"  step rc={s['rc']} {s['seconds']} s: {' '.join(s['argv'][2:])[:100]}")
        if s["stderr_tail"]:
            lines.append("    " + s["stderr_tail"].strip().replace("\n", "\n    ")[-800:])
    if r["files_in_fresh_home"]:
        lines.append("  files written under the fresh HOME: " + ", ".join(r["files_in_fresh_home"]))
    lines += [f"  note: {n}" for n in r["setup_notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", action="store_true", help="after sync, query and status: an MCP session over stdio")
    ap.add_argument("--hold", type=float, default=30.0,
                    help="with --serve: seconds the server stays up after the query (default 30)")
    ap.add_argument("--keep-env", action="store_true",
                    help="pass CI markers and offline switches (ORT_DISABLE_TELEMETRY, HF_*) to the command")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--linger", type=float, default=3.0, help="seconds to keep watching after the command")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per step")
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("MODELS_DIR") or ROOT / "models" / "baked"))
    ap.add_argument("--docs", type=Path, help="documents to sync (default: two of samples/)")
    ap.add_argument("--inside", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--sinkhole", metavar="ADDR",
                    help="only serve the logging DNS + 80/443 sinkhole on this address until SIGTERM (Docker test)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS (instead of a session)")
    args = ap.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if args.sinkhole:
        return sinkhole(args.sinkhole)
    if args.inside:
        args.inside.write_text(json.dumps(inside(args)))
        return 0
    why = can_run()
    if why:
        print(why, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="egress-report-") as tmp:
        out = Path(tmp) / "report.json"
        inner = [sys.executable, str(Path(__file__).resolve()), "--inside", str(out),
                 "--linger", str(args.linger), "--hold", str(args.hold), "--timeout", str(args.timeout),
                 "--models-dir", str(args.models_dir.resolve())]
        inner += ["--serve"] if args.serve else []
        inner += ["--keep-env"] if args.keep_env else []
        inner += ["--docs", str(args.docs.resolve())] if args.docs else []
        inner += ["--", *args.command] if args.command else []
        p = subprocess.run(["unshare", "--net", "--mount", "--fork", "--", *inner])
        if p.returncode != 0 or not out.exists():
            print(f"egress_check: the namespace side failed (exit {p.returncode})", file=sys.stderr)
            return 2
        report = json.loads(out.read_text())
    print(json.dumps(report, indent=2) if args.json else report_text(report))
    if not report["session_ok"]:
        return 2
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
