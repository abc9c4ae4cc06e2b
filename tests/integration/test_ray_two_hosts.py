"""`minirag sync --ray HEAD:PORT` across two network hosts: the head node in this network namespace,
a worker node in another one joined by a veth pair, so the driver reaches the cluster over a
network address rather than loopback, through the CLI with its egress guard on. The head offers no
CPUs, so every task runs on the other host; the index equals a local sync's.

The documents and the index are shared storage, as on a real cluster: the head exports their
folder over SFTP and the worker node mounts it (sshfs, a FUSE network file system) at the same path
in a mount namespace of its own, hiding the local folder, so every file the tasks read crosses
the network. This kernel has no NFS client; sshfs is the network mount it can make.

Needs root (`ip netns`), sshfs and sshd (`apt-get install sshfs openssh-server`), the [cluster]
extra, and no other Ray cluster on the machine (the test ends with `ray stop`); skipped, saying
so, otherwise.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

pytest.importorskip("ray", reason="Ray is not installed (the [cluster] extra): `make test-ray` installs it")

from tests.integration.test_ray_sync import FILES, _app, _assert_same, _contents, docs  # noqa: F401 (docs: a fixture)

pytestmark = [pytest.mark.ray, pytest.mark.model, pytest.mark.timeout(900)]

HEAD_IP, WORKER_IP, PORT, SSH_PORT = "10.77.0.1", "10.77.0.2", 6391, 2291
SSHD, SFTP_SERVER, SSHFS = "/usr/sbin/sshd", "/usr/lib/openssh/sftp-server", shutil.which("sshfs")
RAY = str(Path(sys.executable).with_name("ray"))
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex * 2}
"""Ray's token authentication, as a multi-host cluster runs it: every node and the driver hold the one token."""


def _run(*args: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _file_server(work: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """An SFTP server on the head's address, logging every file it opens: the cluster's file server.

    Returns the server, the log of the files it served and the key a node mounts with."""
    for name in ("host_key", "node_key"):
        made = _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / name))
        assert made.returncode == 0, made.stderr
    (work / "authorized_keys").write_text((work / "node_key.pub").read_text())
    served = work / "sftp.log"  # sftp-server logs each open to its stderr (internal-sftp logs only to syslog)
    subsystem = work / "sftp.sh"
    subsystem.write_text(f"#!/bin/sh\nexec {SFTP_SERVER} -e -l INFO 2>>{served}\n")
    subsystem.chmod(0o755)
    config = work / "sshd_config"
    config.write_text(f"ListenAddress {HEAD_IP}:{SSH_PORT}\nHostKey {work / 'host_key'}\n"
                      f"AuthorizedKeysFile {work / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
                      "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                      f"Subsystem sftp {subsystem}\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    log = work / "sshd.log"
    with log.open("wb") as out:
        server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection((HEAD_IP, SSH_PORT), timeout=1).close()
            return server, served, work / "node_key"
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)


def _served(log: Path) -> set[str]:
    """The paths the file server opened for reading."""
    return set(re.findall(r'open "([^"]+)" flags READ', log.read_text(errors="replace")))


def _mounted_in(pid: str, path: Path) -> bool:
    """Whether process pid sees an sshfs mount at path."""
    try:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[4] == str(path) and " - fuse.sshfs " in line for line in lines)


@pytest.fixture(scope="module")
def two_hosts(models_dir: Path, docs: Path, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
              ) -> Iterator[tuple[str, Path]]:
    """A Ray head here (no CPUs) and a 2-CPU worker node in a network namespace of its own, which
    mounts the folder of the documents (and of the index) from the head over the network.

    Yields the cluster's address and the sftp server's log."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a second network host (ip netns)")
    if SSHFS is None or not (Path(SSHD).exists() and Path(SFTP_SERVER).exists()):
        reason = "needs sshfs and sshd to share storage between the hosts: apt-get install -y sshfs openssh-server"
        if os.environ.get("CI"):  # .ci/run installs them
            pytest.fail(reason)
        pytest.skip(reason)
    if not Path("/dev/fuse").exists():
        pytest.skip("no /dev/fuse: this machine cannot mount a FUSE file system (sshfs)")
    if _run("pgrep", "-x", "raylet").returncode == 0:  # `ray stop` at the end would stop it too
        pytest.skip("another Ray cluster runs on this machine")
    name = f"minirag-{uuid.uuid4().hex[:6]}"
    host_end, node_end = f"vh{name[-6:]}", f"vn{name[-6:]}"
    setup = [["ip", "netns", "add", name],
             ["ip", "link", "add", host_end, "type", "veth", "peer", "name", node_end],
             ["ip", "link", "set", node_end, "netns", name],
             ["ip", "addr", "add", f"{HEAD_IP}/30", "dev", host_end], ["ip", "link", "set", host_end, "up"],
             ["ip", "netns", "exec", name, "ip", "addr", "add", f"{WORKER_IP}/30", "dev", node_end],
             ["ip", "netns", "exec", name, "ip", "link", "set", node_end, "up"],
             ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"]]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELS_DIR": str(models_dir), "RAY_USAGE_STATS_ENABLED": "0",
           **AUTH}
    export = docs.parent  # the documents, and the index the test makes beside them
    server: subprocess.Popen[bytes] | None = None
    try:
        for step in setup:
            done = _run(*step)
            if done.returncode != 0:
                pytest.skip(f"cannot make a second network host here ({' '.join(step)}: {done.stderr.strip()})")
        server, log, key = _file_server(tmp_path_factory.mktemp("fileserver"))
        head = _run(RAY, "start", "--head", "--node-ip-address", HEAD_IP, "--port", str(PORT), "--num-cpus", "0",
                    "--include-dashboard=false", "--disable-usage-stats", env=env)
        assert head.returncode == 0, head.stderr
        # `ip netns exec` gives the node a mount namespace of its own: the mount hides the local
        # folder there and nowhere else, and Ray's processes started after it inherit it.
        mount = [SSHFS, "-p", str(SSH_PORT), "-o", f"IdentityFile={key},StrictHostKeyChecking=no,"
                 "UserKnownHostsFile=/dev/null,BatchMode=yes", f"root@{HEAD_IP}:{export}", str(export)]
        start = [RAY, "start", "--address", f"{HEAD_IP}:{PORT}", "--node-ip-address", WORKER_IP, "--num-cpus", "2",
                 "--disable-usage-stats"]
        worker = _run("ip", "netns", "exec", name, "sh", "-c", f"{shlex.join(mount)} && exec {shlex.join(start)}",
                      env=env)
        assert worker.returncode == 0, worker.stderr
        node_pids = _run("ip", "netns", "pids", name).stdout.split()
        raylets = [pid for pid in node_pids if Path(f"/proc/{pid}/comm").read_text().strip() == "raylet"]
        assert raylets and all(_mounted_in(pid, export) for pid in raylets), "the worker node does not see the mount"
        assert not _mounted_in("self", export), "the mount leaked into the head's namespace"
        yield f"{HEAD_IP}:{PORT}", log
    finally:
        _run(RAY, "stop", "--force")
        for pid in _run("ip", "netns", "pids", name).stdout.split():  # the sshfs daemon
            _run("kill", pid)
        if server is not None:
            server.terminate()
            server.wait(10)
        _run("ip", "link", "del", host_end)
        _run("ip", "netns", "del", name)


def test_a_sync_on_a_cluster_of_two_hosts_equals_a_local_sync(two_hosts: tuple[str, Path], docs: Path,  # noqa: F811
                                                              models_dir: Path, real_embedder: Any,
                                                              tmp_path: Path) -> None:
    import appliance.sync.indexing as indexing

    address, file_server_log = two_hosts
    index = docs.parent / "index"  # on the shared folder: the worker node reads it over the network
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BASE_DIR": str(docs), "DB_PATH": str(index),
           "MODELS_DIR": str(models_dir), **AUTH}

    def sync() -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-m", "appliance", "sync", "--json", "--ray", address], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(json.loads(done.stdout))

    report = sync()
    assert report["failed"] == [] and report["added"] == len(FILES), report
    # Every document was read on the worker node, through the file server.
    opened = _served(file_server_log)
    assert {str(docs / name) for name in FILES} <= opened, sorted(opened)

    with pytest.MonkeyPatch.context() as patch:  # each document in a model call of its own, as a Ray task embeds it
        patch.setattr(indexing, "EMBED_BATCH_CHUNKS", 1)
        local = _app(docs, tmp_path / "local", models_dir, real_embedder)
        assert local.sync().added == len(FILES)
    _assert_same(_contents(_app(docs, index, models_dir)), _contents(local))

    # One paragraph more: the task on the worker node reads the index over the network to reuse
    # the vectors of the file's other chunks.
    edited = docs / "ocrmypdf" / "linn.txt"
    edited.write_text(edited.read_text(encoding="utf-8") + "\n\nA closing paragraph about shared storage.\n",
                      encoding="utf-8")
    again = sync()
    assert (again["updated"], again["failed"]) == (1, []) and again["chunksReused"] >= 1, again
    assert again["chunksEmbedded"] >= 1, again
    opened = _served(file_server_log)
    assert any(path.startswith(f"{index}/") for path in opened), "the worker node did not read the index"
