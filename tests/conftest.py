"""Shared fixtures: settings on tmp dirs, the shared data folder, the real baked model."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from appliance.config import load_settings
from appliance.models.manifest import default_models_dir

ROOT = Path(__file__).resolve().parent.parent


def shared_path() -> Path:
    return Path(os.environ.get("MINIRAG_SHARED", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared() -> Path:
    """../shared (or $MINIRAG_SHARED); a clear failure when it is missing — CI always has it."""
    path = shared_path()
    if not (path / "corpus").is_dir():
        pytest.fail(f"shared test data is missing: {path} (set MINIRAG_SHARED to its location)")
    return path


@pytest.fixture(scope="session")
def models_dir() -> Path:
    path = Path(os.environ.get("MODELS_DIR", default_models_dir()))
    if not path.is_dir() or not any(path.iterdir()):
        pytest.fail(f"no baked models in {path}: run `make models` first")
    return path


@pytest.fixture(scope="session")
def real_embedder(models_dir: Path):  # type: ignore[no-untyped-def]
    """The default multilingual model, loaded once for the whole session."""
    from appliance.embed import Embedder, load_spec
    from appliance.config import DEFAULT_MODEL

    return Embedder(load_spec(DEFAULT_MODEL, models_dir), models_dir)


def app_factory(root: Path, models_dir: Path, embedder) -> Callable[..., object]:  # type: ignore[no-untyped-def]
    """build(docs=None, **env): an Appliance over `docs` (default root/docs), index in root/index."""
    from appliance.service import Appliance

    def build(docs: Path | None = None, **env: str):  # type: ignore[no-untyped-def]
        docs = docs or root / "docs"
        docs.mkdir(parents=True, exist_ok=True)
        settings = load_settings({"BASE_DIR": str(docs), "DB_PATH": str(root / "index"),
                                  "MODELS_DIR": str(models_dir), **env})
        return Appliance(settings, embedder=embedder)

    return build


@pytest.fixture
def make_app(tmp_path: Path, models_dir: Path, real_embedder) -> Callable[..., object]:  # type: ignore[no-untyped-def]
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
