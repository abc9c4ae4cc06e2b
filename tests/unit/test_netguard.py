"""The egress guard. Audit hooks are permanent, so each case runs in a fresh interpreter."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from appliance.platform import netguard

REPO = Path(__file__).resolve().parents[2]

PRELUDE = """
import socket, sys, urllib.request, urllib.error
from appliance.platform import netguard

def refused(fn):
    try:
        fn()
    except PermissionError as exc:
        assert "network access is disabled" in str(exc), exc
        return True
    except urllib.error.URLError as exc:  # urlopen wraps the OSError
        assert isinstance(exc.reason, PermissionError), exc
        return True
    return False

def listener(host="127.0.0.1"):
    srv = socket.create_server((host, 0))
    return srv, srv.getsockname()[1]
"""


def run_guarded(body: str, *, timeout: float = 60) -> str:
    code = PRELUDE + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def test_outbound_connections_and_lookups_refused_when_url_ingest_off():
    out = run_guarded(
        """
        srv, port = listener()  # bind + listen are not egress
        netguard.install(allow_fetch=False)
        assert refused(lambda: socket.create_connection(("127.0.0.1", port), timeout=2))
        assert refused(lambda: socket.socket().connect_ex(("127.0.0.1", port)))
        assert refused(lambda: socket.getaddrinfo("example.com", 80))
        assert refused(lambda: socket.gethostbyname("example.com"))
        assert refused(lambda: socket.gethostbyaddr("127.0.0.1"))
        assert refused(lambda: socket.getaddrinfo("localhost", port))
        assert refused(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2))
        assert refused(lambda: urllib.request.urlopen("http://example.com/", timeout=2))
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        assert refused(lambda: udp.sendto(b"x", ("127.0.0.1", 53)))
        assert refused(lambda: socket.create_connection(("::1", port), timeout=2))
        print("OK")
        """
    )
    assert out.strip() == "OK"


def test_local_ipc_and_listening_still_work():
    out = _serve_and_talk()
    assert out.endswith("OK")


def _serve_and_talk() -> str:
    """A guarded process listens on 127.0.0.1 and accepts an outside client (daemon mode)."""
    code = PRELUDE + textwrap.dedent(
        """
        import os, tempfile, multiprocessing
        netguard.install(allow_fetch=False)
        a, b = socket.socketpair()
        a.sendall(b"ping"); assert b.recv(4) == b"ping"
        path = os.path.join(tempfile.mkdtemp(), "s")
        usrv = socket.socket(socket.AF_UNIX); usrv.bind(path); usrv.listen()
        cli = socket.socket(socket.AF_UNIX); cli.connect(path)
        uconn, _ = usrv.accept(); cli.sendall(b"unix"); assert uconn.recv(4) == b"unix"
        q = multiprocessing.get_context("spawn").Queue(); q.put(7); assert q.get(timeout=20) == 7
        tcp, port = listener()
        print(port, flush=True)
        peer, _ = tcp.accept()
        peer.sendall(peer.recv(4)[::-1])
        peer.close()
        print("OK", flush=True)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), proc.stderr.read()
        with socket.create_connection(("127.0.0.1", int(line)), timeout=10) as c:
            c.sendall(b"abcd")
            assert c.recv(4) == b"dcba"
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        return (line + out).strip()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_fetch_permit_allows_exactly_one_destination():
    out = run_guarded(
        """
        srv, port = listener()
        other, other_port = listener()
        netguard.install(allow_fetch=True)
        assert refused(lambda: socket.create_connection(("127.0.0.1", port), timeout=2))
        with netguard.fetch_permit("127.0.0.1", port):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            assert refused(lambda: socket.create_connection(("127.0.0.1", other_port), timeout=2))
            assert refused(lambda: socket.getaddrinfo("example.com", 80))
        assert refused(lambda: socket.create_connection(("127.0.0.1", port), timeout=2))
        with netguard.lookup_permit("localhost"):
            assert socket.getaddrinfo("localhost", port, 0, socket.SOCK_STREAM)
            assert refused(lambda: socket.getaddrinfo("example.com", 80))
        assert refused(lambda: socket.getaddrinfo("localhost", port))
        print("OK")
        """
    )
    assert out.strip() == "OK"


def test_a_named_cluster_may_be_reached_on_any_port_from_any_thread_and_nothing_else():
    out = run_guarded(
        """
        import threading
        srv, port = listener()
        other, other_port = listener()
        netguard.install(allow_fetch=False)  # `sync --ray` needs no URL ingestion
        assert refused(lambda: socket.create_connection(("127.0.0.1", port), timeout=2))
        assert refused(lambda: socket.getaddrinfo("localhost", port))
        netguard.permit_cluster(["localhost"])  # a name: resolved once, then its addresses and the name pass
        results = []
        def other_thread():
            socket.create_connection(("127.0.0.1", other_port), timeout=2).close()
            results.append(bool(socket.getaddrinfo("localhost", port, 0, socket.SOCK_STREAM)))
        t = threading.Thread(target=other_thread); t.start(); t.join()
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        assert results == [True], results
        assert refused(lambda: socket.getaddrinfo("example.com", 80))
        assert refused(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("10.9.9.9", 53)))
        netguard.permit_cluster(["10.9.9.9"])  # the nodes the cluster reports are added to the head
        try:  # let through by the guard; whether a route exists is the machine's business
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("10.9.9.9", 9))
        except PermissionError:
            raise
        except OSError:
            pass
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        print("OK")
        """
    )
    assert out.strip() == "OK"


def test_permit_is_thread_local():
    out = run_guarded(
        """
        import threading
        srv, port = listener()
        netguard.install(allow_fetch=True)
        results = []
        def other_thread():
            results.append(refused(lambda: socket.create_connection(("127.0.0.1", port), timeout=2)))
        with netguard.fetch_permit("127.0.0.1", port):
            t = threading.Thread(target=other_thread); t.start(); t.join()
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        assert results == [True], results
        print("OK")
        """
    )
    assert out.strip() == "OK"


def test_permits_grant_nothing_when_url_ingest_off_and_install_is_idempotent():
    out = run_guarded(
        """
        srv, port = listener()
        netguard.install(allow_fetch=False)
        netguard.install(allow_fetch=False)
        netguard.install(allow_fetch=True)  # cannot widen a strict guard
        assert netguard.installed() and not netguard.fetch_allowed()
        with netguard.fetch_permit("127.0.0.1", port):
            assert refused(lambda: socket.create_connection(("127.0.0.1", port), timeout=2))
        with netguard.lookup_permit("localhost"):
            assert refused(lambda: socket.getaddrinfo("localhost", port))
        print("OK")
        """
    )
    assert out.strip() == "OK"


def test_fetcher_works_under_the_guard_and_is_disabled_without_permission():
    out = run_guarded(
        """
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from appliance.ingest.fetch import fetch_url
        from appliance.errors import UrlIngestDisabled

        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                body = b"<title>t</title>hello"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers(); self.wfile.write(body)
            def log_message(self, *a): pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        netguard.install(allow_fetch=True)
        page = fetch_url(f"http://localhost:{port}/", allow_private=True)
        assert page.body.endswith(b"hello"), page
        # Anything else in the same process is still refused.
        assert refused(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2))
        httpd.shutdown()
        print("OK")
        """
    )
    assert out.strip() == "OK"
    out = run_guarded(
        """
        from appliance.ingest.fetch import fetch_url
        from appliance.errors import UrlIngestDisabled
        netguard.install(allow_fetch=False)
        try:
            fetch_url("http://127.0.0.1:9/", allow_private=True)
        except UrlIngestDisabled:
            print("OK")
        """
    )
    assert out.strip() == "OK"


def test_offline_env_lists_the_switches():
    env = netguard.offline_env()
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY",
                "DO_NOT_TRACK",
                "ORT_DISABLE_TELEMETRY"):
        assert env[key] == "1"
    env["HF_HUB_OFFLINE"] = "0"  # a copy
    assert netguard.offline_env()["HF_HUB_OFFLINE"] == "1"


def test_apply_offline_env_keeps_operator_values(monkeypatch):
    for key in netguard.offline_env():
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DO_NOT_TRACK", "operator")
    netguard.apply_offline_env()
    assert os.environ["DO_NOT_TRACK"] == "operator"
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_importing_the_package_switches_onnxruntime_telemetry_off_before_it_loads():
    # onnxruntime starts its telemetry uploader when it is imported; the switch must already be
    # set by then, in any process that runs appliance code (tests/faults/test_egress.py proves
    # the effect from outside). The operator's own value is kept.
    code = ("import os, sys, appliance; assert 'onnxruntime' not in sys.modules, 'imported too early'; "
            "print(os.environ['ORT_DISABLE_TELEMETRY'], os.environ['HF_HUB_OFFLINE'])")
    env = {k: v for k, v in os.environ.items() if k not in netguard.OFFLINE_ENV}
    env["PYTHONPATH"] = str(REPO)

    def run(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code], env={**env, **extra}, cwd=REPO,
                              capture_output=True, text=True, timeout=60)

    out = run()
    assert out.returncode == 0 and out.stdout.split() == ["1", "1"], out.stderr
    assert run(ORT_DISABLE_TELEMETRY="operator").stdout.split() == ["operator", "1"]


def test_importing_netguard_installs_nothing():
    # The test process itself must stay unguarded (other tests use the network stack).
    assert not netguard.installed()
    s = socket.create_server(("127.0.0.1", 0))
    socket.create_connection(s.getsockname(), timeout=2).close()
    s.close()


@pytest.mark.parametrize("event", ["socket.connect", "socket.getaddrinfo", "socket.sendto"])
def test_event_names_exist_in_this_python(event):
    """The hook keys on these names; make sure the interpreter raises them."""
    out = run_guarded(
        f"""
        seen = []
        sys.addaudithook(lambda e, a: seen.append(e) if e.startswith("socket.") else None)
        srv, port = listener()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError:
            pass
        socket.getaddrinfo("127.0.0.1", port)
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", port))
        assert {event!r} in seen, seen
        print("OK")
        """
    )
    assert out.strip() == "OK"
