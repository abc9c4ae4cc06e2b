"""Real clients against the installed `minirag` command: a small corpus, indexed once, served over stdio."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

MINIRAG = str(Path(sys.executable).with_name("minirag"))

CORPUS = {
    "guide/errors.md": (
        "---\ntitle: Error catalogue\n---\n# Error catalogue\n\n"
        "## Flux controller\n\n"
        "The code ERR_ZORBLATT_7741 means the flux controller overheated during calibration.\n"
        "Let it cool for ten minutes, then restart the calibration from the service menu.\n\n"
        "## Network\n\nERR_NET_12 means the uplink cable is unplugged.\n"
    ),
    "guide/vacation.md": (
        "# Vacation policy\n\nEmployees receive twenty-eight days of paid vacation per year.\n"
        "Unused days carry over until the end of March of the following year.\n"
    ),
    "ru/pogoda.md": (
        "# Погода в Новосибирске\n\nЗимой в Новосибирске морозы достигают минус сорока градусов.\n"
        "Летом бывает жарко, до тридцати пяти градусов.\n"
    ),
    "notes/recipe.txt": "Pancakes: flour, milk, two eggs, a pinch of salt.\nFry on a hot pan.\n",
    "private/secret.md": "# Hidden\n\nThe password is hunter2 and ERR_ZORBLATT_7741 appears here too.\n",
    ".indexignore": "private/\n",
}


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for rel, text in CORPUS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    return root


@pytest.fixture(scope="session")
def server_env(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for `minirag serve` over the corpus, indexed once by the real CLI."""
    env = {k: v for k, v in os.environ.items() if k not in ("BASE_DIRS", "MODEL_NAME", "MCP_INSTRUCTIONS_EXTRA")}
    env |= {"BASE_DIR": str(corpus), "DB_PATH": str(tmp_path_factory.mktemp("index") / "db")}
    done = subprocess.run([MINIRAG, "sync", "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["added"] == 4
    return env


class LiveSession:
    """One stdio MCP session kept open on a private event loop; tests call it synchronously."""

    def __init__(self, env: dict[str, str], args: list[str] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client = Client(StdioTransport(MINIRAG, args or ["serve"], env=env), timeout=300)
        self.run(self.client.__aenter__())

    def run(self, coro: Any, timeout: float = 300) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, name: str, args: dict[str, Any] | None = None) -> Any:
        return self.run(self.client.call_tool(name, args or {}, raise_on_error=False))

    def ok(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = self.call(name, args)
        assert not result.is_error, result.structured_content
        return result.structured_content

    def error(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = self.call(name, args)
        assert result.is_error, result.structured_content
        return result.structured_content["error"]

    def close(self) -> None:
        try:
            self.run(self.client.__aexit__(None, None, None), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.fixture(scope="session")
def session(server_env: dict[str, str]) -> Iterator[LiveSession]:
    live = LiveSession(server_env)
    yield live
    live.close()


@pytest.fixture(scope="session")
def live_session() -> type[LiveSession]:
    """Open another session (e.g. with a broken environment); the test closes it."""
    return LiveSession
