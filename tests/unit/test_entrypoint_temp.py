"""The container's entrypoint names a missing writable /tmp (`--read-only` without `--tmpfs /tmp`) before a
mode that needs one starts; tests/docker/test_image.py runs the real container that way."""
from __future__ import annotations

import tempfile

import pytest

from appliance.adapters import entrypoint


def _no_temp_dir() -> str:
    raise FileNotFoundError("No usable temporary directory found in ['/tmp', '/var/tmp', '/usr/tmp']")


@pytest.mark.parametrize("mode", ["sync", "serve", "daemon"])
def test_a_mode_that_needs_a_temp_dir_refuses_with_the_fix(mode: str, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(tempfile, "gettempdir", _no_temp_dir)
    started: list[str] = []
    for runner in ("run_stdio", "run_daemon", "run_sync"):
        monkeypatch.setattr(entrypoint, runner, lambda *_a, _n=runner: started.append(_n) or 0)
    assert entrypoint.main([mode]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no writable temporary directory") and "--tmpfs /tmp" in err
    assert started == []


def test_with_a_temp_dir_the_mode_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    monkeypatch.setattr(entrypoint, "run_sync", lambda *_a: started.append("run_sync") or 0)
    assert entrypoint.main(["sync"], environment=object()) == 0  # type: ignore[arg-type]
    assert started == ["run_sync"]
