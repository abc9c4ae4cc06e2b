"""Shared fixtures: settings on tmp dirs, the shared data folder, the real baked model."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from appliance.config import load_settings
from appliance.models.manifest import default_models_dir

if TYPE_CHECKING:  # imported where used: collecting the tests loads no model code
    from appliance.embed import Embedder, OnnxEmbedder
    from appliance.service import Appliance
    from tests.fixtures.s3_server import S3Server

ROOT = Path(__file__).resolve().parent.parent

# Fixtures shared by tests in several folders, registered here rather than imported into each test
# module (an imported fixture reads as an unused name that the test's parameter then shadows).
pytest_plugins = ["tests.fixtures.http_fakes"]


def shared_path() -> Path:
    return Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))


def shared_missing() -> str | None:
    """Why the shared test data cannot be used, or None when it is there."""
    path = shared_path()
    if (path / "corpus").is_dir():
        return None
    return (f"shared test data not found at {path}: put the project's shared/ folder (document corpus, "
            "OCR pages, retrieval sets) beside the checkout as ../shared, or set MINIRAG_SHARED to it "
            "(README, 'Test data')")


SHARED_SKIP = "needs the shared test data"


@pytest.hookimpl(trylast=True)  # after -m has deselected: only tests that would run are marked
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the shared data, the tests that need it (marker `shared` or the `shared` fixture) are
    skipped on a developer's machine; under CI they run and fail, naming what is missing."""
    reason = shared_missing()
    if reason is None or os.environ.get("CI"):
        return
    needing = [item for item in items if item.get_closest_marker("shared")
               or "shared" in getattr(item, "fixturenames", ())]
    for item in needing:
        item.add_marker(pytest.mark.skip(reason=SHARED_SKIP))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """One line saying how to get the shared data, after the skips it caused; counted from the reports, so
    it holds when xdist's workers collected and ran the tests."""
    skipped = sum(SHARED_SKIP in str(report.longrepr) for report in terminalreporter.stats.get("skipped", ()))
    if skipped:
        terminalreporter.write_line(f"{skipped} tests skipped: {shared_missing()}", yellow=True)


@pytest.fixture(scope="session")
def shared() -> Path:
    """../shared (or $MINIRAG_SHARED); a clear failure when it is missing — CI always has it."""
    reason = shared_missing()
    if reason is not None:
        pytest.fail(reason)
    return shared_path()


@pytest.fixture(scope="session")
def models_dir() -> Path:
    path = Path(os.environ.get("MODELS_DIR", default_models_dir()))
    if not path.is_dir() or not any(path.iterdir()):
        pytest.fail(f"no baked models in {path}: run `make models` first")
    return path


@pytest.fixture(scope="session")
def real_embedder(models_dir: Path) -> OnnxEmbedder:
    """The default multilingual model, loaded once for the whole session."""
    from appliance.config import DEFAULT_MODEL
    from appliance.embed import OnnxEmbedder, load_spec

    return OnnxEmbedder(load_spec(DEFAULT_MODEL, models_dir), models_dir)


def app_factory(root: Path, models_dir: Path, embedder: Embedder) -> Callable[..., Appliance]:
    """build(docs=None, **env): an Appliance over `docs` (default root/docs), index in root/index."""
    from appliance.service import Appliance

    def build(docs: Path | None = None, **env: str) -> Appliance:
        docs = docs or root / "docs"
        docs.mkdir(parents=True, exist_ok=True)
        settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(root / "index"),
                                  "MODELS_DIR": str(models_dir), **env})
        return Appliance(settings, embedder=embedder)

    return build


@pytest.fixture
def make_app(tmp_path: Path, models_dir: Path, real_embedder: OnnxEmbedder) -> Callable[..., Appliance]:
    """Build an Appliance over `docs` (default tmp_path/docs) with the real model."""
    return app_factory(tmp_path, models_dir, real_embedder)


SLOW_CONVERT = '''
import os, time
import appliance.ingest.convert as _convert
_real = _convert.to_markdown
def _slow(path, *args, **kwargs):
    if "slow" in os.path.basename(str(path)):
        time.sleep(3600)  # a conversion that outlasts any stop grace
    return _real(path, *args, **kwargs)
_convert.to_markdown = _slow
'''


@pytest.fixture
def slow_conversions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment in which converting a file named *slow* takes an hour (in every process
    started with it: conversion workers load the patch from a sitecustomize on PYTHONPATH)."""
    hook = tmp_path / "slow-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_CONVERT)
    path = os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    monkeypatch.setenv("PYTHONPATH", path)
    return dict(os.environ, PYTHONPATH=path)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """A real S3-compatible server (moto's) on loopback for the tests of one module; boto3 is imported only
    when a test asks for it."""
    from tests.fixtures.s3_server import start_s3_server

    server = start_s3_server()
    try:
        yield server
    finally:
        server.stop()
