"""What a sync takes as a change, what it refuses, and how it names a problem it cannot fix."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.errors import RootsChanged

pytestmark = pytest.mark.model


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_same_size_and_mtime_edit_is_seen_only_with_hash_detection(make_app, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    note = _write(docs / "note.md", "The courier arrives on Tuesday.\n")
    app = make_app(docs)
    app.sync()
    st = note.stat()
    note.write_text("The courier arrives on Fridays.\n")  # same length, like rsync -a / cp -p
    os.utime(note, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert make_app(docs).sync().unchanged == 1  # the documented trade-off of the default
    hashing = make_app(docs, CHANGE_DETECTION="hash")
    assert hashing.status().config.change_detection == "hash"
    report = hashing.sync()
    assert report.updated == 1
    assert "Fridays" in hashing.read(str(note)).content


def test_a_root_mounted_elsewhere_is_refused_not_reindexed(make_app, tmp_path: Path) -> None:
    host = tmp_path / "host-docs"
    for i in range(3):
        _write(host / f"n{i}.md", f"Note {i} about lighthouse keeping.\n")
    make_app(host).sync()
    container = tmp_path / "container-docs"
    shutil.copytree(host, container)
    moved = make_app(container)
    with pytest.raises(RootsChanged) as caught:
        moved.sync()
    assert str(host) in caught.value.message and str(container) in caught.value.message
    assert "--forget-roots" in caught.value.hint
    status = moved.status().wire()["index"]
    assert status["unconfiguredRoots"] == {str(host): 3} and status["sourceCount"] == 3
    report = moved.sync(forget_roots=True)
    assert (report.added, report.deleted) == (3, 3)
    assert moved.status().index.unconfigured_roots is None


def _unprivileged(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CLI as root without the capabilities that override file permissions: it meets
    mode bits and owners like the container's unprivileged user does."""
    return subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--",
                           sys.executable, "-m", "appliance", *args, "--json"], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def env(tmp_path: Path, models_dir: Path) -> dict[str, str]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to drop the permission-override capabilities")
    docs = tmp_path / "docs"
    docs.mkdir()
    return {**os.environ, "BASE_DIR": str(docs), "DB_PATH": str(tmp_path / "index"), "MODELS_DIR": str(models_dir)}


@pytest.mark.slow  # six CLI subprocesses
def test_an_unreadable_file_stops_being_served(env: dict[str, str]) -> None:
    docs = Path(env["BASE_DIR"])
    keep = _write(docs / "keep.md", "Public note on orchard pruning.\n")
    secret = _write(docs / "secret.md", "Salary table for the orchard team.\n")
    assert _unprivileged(["sync"], env).returncode == 0
    secret.chmod(0)
    report = json.loads(_unprivileged(["sync"], env).stdout)
    assert [f["code"] for f in report["skipped"]] == ["unreadable"] and report["deleted"] == 1
    hits = json.loads(_unprivileged(["query", "orchard team salary"], env).stdout)["results"]
    assert {h["source"] for h in hits} == {str(keep)}
    files = {f["filePath"]: f["state"] for f in json.loads(_unprivileged(["list"], env).stdout)["files"]}
    assert files == {str(keep): "indexed", str(secret): "unreadable"}
    read = _unprivileged(["read", str(secret)], env)
    assert read.returncode == 1 and json.loads(read.stdout)["error"]["code"] == "not_found"


@pytest.mark.slow  # two CLI subprocesses
def test_an_index_owned_by_another_user_names_the_owner_and_the_fix(env: dict[str, str]) -> None:
    docs = Path(env["BASE_DIR"])
    _write(docs / "a.md", "Anything at all.\n")
    assert _unprivileged(["sync"], env).returncode == 0
    for base, dirs, files in os.walk(env["DB_PATH"]):  # as if another user (a host process) had written it
        for name in [*dirs, *files]:
            os.chown(Path(base) / name, 4242, 4242)
    os.chown(env["DB_PATH"], 4242, 4242)
    _write(docs / "b.md", "Something new.\n")
    proc = _unprivileged(["sync"], env)
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "index_unwritable"
    assert "uid 4242" in error["message"] and "runs as uid 0" in error["message"]
    assert "chown -R 0:0" in error["hint"]
