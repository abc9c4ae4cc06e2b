"""Issue #14: `.gitignore` rules hold inside the image, which has no `git`, for a folder owned by another uid.

Built by `make image` beforehand (scripts/docker_ci.sh does both); these tests build nothing. Run with
`MINIRAG_DOCKER=1 pytest -m docker tests/docker/test_ignore_rules.py`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.docker.test_image import _paths, docker_run

pytestmark = [pytest.mark.docker, pytest.mark.slow]

OWNER = 4242
"""Neither root nor the container's uid 1000: a host git would call this repository's ownership dubious."""


@pytest.fixture
def repo(docs: Path) -> Path:
    """The samples as a git work tree whose .gitignore lists secret/, every file owned by OWNER."""
    (docs / ".git" / "info").mkdir(parents=True)
    (docs / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (docs / ".git" / "info" / "exclude").write_text("*.local.md\n")
    (docs / ".gitignore").write_text("secret/\n")
    (docs / "secret").mkdir()
    (docs / "secret" / "creds.md").write_text("# Credentials\n\nThe admin password is hunter2.\n")
    (docs / "laptop.local.md").write_text("# Laptop\n\nThe disk password is hunter2 as well.\n")
    for dirpath, dirnames, filenames in os.walk(docs):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
        for name in [*dirnames, *filenames, "."]:
            os.chown(os.path.join(dirpath, name), OWNER, OWNER, follow_symlinks=False)
    return docs


def test_gitignored_secret_is_never_indexed(image: str, repo: Path, volume: str) -> None:
    mounts = [f"{repo}:/docs:ro", f"{volume}:/index"]
    run = docker_run(image, "sync", "--json", mounts=mounts)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)  # the ignored folder and file are left out, and named with the rule
    assert sorted((f["path"], f["code"]) for f in report["skipped"]) == [
        ("/docs/laptop.local.md", "ignored"), ("/docs/secret", "ignored")]

    listed = docker_run(image, "list", "--ignored", "--json", mounts=mounts)
    assert listed.returncode == 0, listed.stderr
    files = {f["filePath"]: f for f in json.loads(listed.stdout)["files"]}
    assert "/docs/secret/creds.md" not in files  # an ignored directory is not even entered
    assert files["/docs/secret"] == {"filePath": "/docs/secret", "displayPath": "secret", "state": "ignored",
                                     "reason": "ignored by .gitignore"}
    assert files["/docs/laptop.local.md"]["reason"] == "ignored by .git/info/exclude"
    assert files["/docs/backup-policy.md"]["state"] == "indexed"

    hits = docker_run(image, "query", "hunter2 password", "--json", mounts=mounts)
    assert hits.returncode == 0, hits.stderr
    paths = _paths(json.loads(hits.stdout))
    assert "/docs/secret/creds.md" not in paths and "/docs/laptop.local.md" not in paths, paths

    status = docker_run(image, "status", mounts=mounts)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["ignoreProblems"] == []
