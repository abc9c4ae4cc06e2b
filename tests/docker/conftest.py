"""The image tests run only on request: they need a Docker engine and a built image.

Run them with `scripts/docker_ci.sh` (starts dockerd, builds, tests) or, with an
engine running, `make image && make docker-test` (sets MINIRAG_DOCKER=1).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

IMAGE = os.environ.get("MINIRAG_IMAGE", "minirag:latest")
DOCKER = os.environ.get("DOCKER", shutil.which("docker") or "docker")
SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SKIP_REASON = ("image tests are off: run `scripts/docker_ci.sh`, or `make image && make docker-test` "
               "with a Docker engine running (they set MINIRAG_DOCKER=1)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("MINIRAG_DOCKER") == "1":
        return
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def image() -> str:
    """The image under test; a clear failure when it was not built."""
    try:
        found = subprocess.run([DOCKER, "image", "inspect", IMAGE], capture_output=True, timeout=60)
    except FileNotFoundError:
        pytest.fail(f"no docker CLI ({DOCKER}); run scripts/docker_ci.sh")
    if found.returncode != 0:
        pytest.fail(f"image {IMAGE} is missing: build it with `make image` first "
                    f"({found.stderr.decode(errors='replace').strip()[:200]})")
    return IMAGE


@pytest.fixture
def volume(request: pytest.FixtureRequest) -> str:
    """A fresh named volume for /index, removed afterwards."""
    name = f"minirag-test-{os.getpid()}-{request.node.name[:40].replace('[', '-').replace(']', '')}".lower()
    subprocess.run([DOCKER, "volume", "rm", "-f", name], capture_output=True)
    yield name
    subprocess.run([DOCKER, "volume", "rm", "-f", name], capture_output=True)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """A copy of samples/ that a test may change (mounted read-only into the container)."""
    target = tmp_path / "docs"
    shutil.copytree(SAMPLES, target)
    target.chmod(0o755)
    return target
