"""Zero egress from the image, seen from another container (issue #14 point 4).

An `--internal` Docker network (no way off the machine) holds a logger container: the
image's own python3 running scripts/egress_check.py --sinkhole (mounted read-only), a
DNS server that logs every query and answers every A with its own address, where it
also accepts and logs TCP 80/443. The appliance runs on that network with
`--dns <logger>`, hardened as an operator runs it: a one-shot `sync`, then the default
stdio mode (MCP server + scheduler) with initialize, one query_documents call, 30 s up,
stdin closed. A control container resolving a made-up name first proves that lookups
reach the logger. Before ORT_DISABLE_TELEMETRY the appliance's onnxruntime asked for
mobile.events.data.microsoft.com and connected to the sinkhole on 443.
"""
from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from scripts.egress_check import _mcp_session
from tests.docker.conftest import DOCKER

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "egress_check.py"
CONTROL_NAME = "control.egress-check.invalid"
HARDENED = ["--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--user", "1000:1000"]


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture
def sinkhole(image: str):  # type: ignore[no-untyped-def]
    """(network, logger address, stop() -> report): the internal network and its DNS logger."""
    tag = uuid.uuid4().hex[:10]
    network, logger = f"minirag-egress-{tag}", f"minirag-egress-dns-{tag}"
    docker("network", "create", "--internal", network)
    try:
        docker("run", "-d", "--name", logger, "--network", network, "--user", "0", "--pull", "never",
               "--entrypoint", "python3", "-v", f"{SCRIPT}:/egress_check.py:ro", image,
               "/egress_check.py", "--sinkhole", "auto")
        deadline = time.monotonic() + 60
        while "ready" not in docker("logs", logger, check=False).stderr:
            assert time.monotonic() < deadline, docker("logs", logger, check=False).stderr
            time.sleep(0.5)
        address = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                         logger).stdout.strip()

        def stop() -> dict:
            docker("stop", "-t", "10", logger)
            return json.loads(docker("logs", logger).stdout.strip().splitlines()[-1])

        yield network, address, stop
    finally:
        docker("rm", "-f", logger, check=False)
        docker("network", "rm", network, check=False)


def test_start_sync_query_shutdown_send_nothing(image: str, sinkhole, docs: Path, volume: str) -> None:  # type: ignore[no-untyped-def]
    network, address, stop = sinkhole
    on_net = ["--network", network, "--dns", address]
    control = docker("run", "--rm", "--pull", "never", *on_net, "--entrypoint", "python3", image, "-c",
                     f"import socket\ntry: print(socket.getaddrinfo({CONTROL_NAME!r}, 443)[0][4])\n"
                     "except OSError as e: print(e)", check=False)
    mounts = ["-v", f"{docs}:/docs:ro", "-v", f"{volume}:/index"]
    sync = docker("run", "--rm", "--pull", "never", *on_net, *HARDENED, *mounts, image, "sync", timeout=600,
                  check=False)
    assert sync.returncode == 0, sync.stderr[-2000:]
    serve = _mcp_session([DOCKER, "run", "-i", "--rm", "--pull", "never", *on_net, *HARDENED, *mounts, image],
                         {"HOME": str(docs.parent)}, timeout=600, hold=30)
    report = stop()
    assert serve["ok"], serve
    names = set(report["dns_names"])
    assert CONTROL_NAME in names, f"the control lookup never reached the logger ({control.stdout.strip()}): {report}"
    assert names == {CONTROL_NAME}, f"the appliance looked up {sorted(names - {CONTROL_NAME})}: {report['dns_log']}"
    assert report["sinkhole_accepted"] == [], report["sinkhole_accepted"]
