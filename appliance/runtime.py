"""Settings, the Appliance and its warm-up for one server process; nothing here imports fastmcp.

`minirag serve` builds the Runtime and starts its warm-up (the service, LanceDB,
fastembed, the model) before the MCP server library is imported, so the stdio front
can answer a first `query_documents` from the warm Appliance while fastmcp is still
loading (see appliance/stdio_front.py). The tool results rendered here are the ones
the fastmcp tools in appliance/server.py return.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from appliance.config import Environment, Settings
from appliance.errors import ApplianceError, ConfigError
from appliance.instructions import build_instructions

if TYPE_CHECKING:
    from pydantic import BaseModel

    from appliance.service import Appliance

log = logging.getLogger("appliance.server")


class Runtime:
    """Settings and the Appliance for one server process, built on first use.

    `environment` is what the process's composition root read; `overrides` are the CLI flags
    (the keyword arguments of `Environment.settings`)."""

    def __init__(self, environment: Environment, overrides: dict[str, Any] | None = None) -> None:
        self.environment = environment
        self.overrides = overrides or {}
        self._lock = threading.Lock()
        self._settings: Settings | None = None
        self._settings_error: ConfigError | None = None
        self._appliance: Appliance | None = None
        self._warming = False
        self.imported = threading.Event()
        """Set once the warm-up has imported the service and the model's libraries (or given up)."""
        self.warmed = threading.Event()
        """Set once the warm-up has finished, whether or not it succeeded."""

    def settings(self) -> Settings:
        """The settings in effect; a broken configuration raises the same ConfigError every time."""
        if self._settings is None and self._settings_error is None:
            try:
                self._settings = self.environment.settings(**self.overrides)
            except ConfigError as exc:
                self._settings_error = exc
        if self._settings_error is not None:
            raise self._settings_error
        assert self._settings is not None
        return self._settings

    def instructions(self) -> str:
        """The server instructions: the policy, plus the operator's line unless the configuration is broken."""
        try:
            extra = self.settings().instructions_extra
        except ConfigError:
            extra = ""
        return build_instructions(extra)

    @property
    def warming(self) -> bool:
        """True once warm_up() has been called."""
        return self._warming

    def warm_up(self) -> None:
        """Import the service, load the model and open the index in the background, once."""
        with self._lock:
            if self._warming:
                return
            self._warming = True
        threading.Thread(target=self._warm, name="warm-up", daemon=True).start()

    def _warm(self) -> None:
        try:
            app = self.appliance()
            from appliance.embed import import_fastembed

            import_fastembed()
            self.imported.set()
            app.warm_up()
        except ApplianceError:
            pass  # the first tool call reports it as a value
        except Exception:
            log.warning("warm-up failed; the first tool call will retry", exc_info=True)
        finally:
            self.imported.set()
            self.warmed.set()

    def appliance(self) -> Appliance:
        with self._lock:
            if self._appliance is None:
                from appliance.service import Appliance

                self._appliance = Appliance(self.settings())
            return self._appliance


def tool_data(model: type[BaseModel], work: Callable[[], Any]) -> dict[str, Any]:
    """What a tool returns as structured content: `work()`'s result, validated by `model`, as JSON data."""
    out = work()
    out = out.to_dict() if hasattr(out, "to_dict") else out
    return model.model_validate(out).model_dump(mode="json")


def result_text(data: dict[str, Any]) -> str:
    """The text content that accompanies a tool's structured content."""
    return json.dumps(data, ensure_ascii=False, default=str)


_QUERY_ARGUMENTS = {"query": (str, 1, 4000), "topK": (int, 1, 100), "scope": (str, 1, 4096),
                    "docClass": (str, 1, 100)}


def early_tool_call(runtime: Runtime, name: Any, arguments: Any) -> Callable[[], dict[str, Any]] | None:
    """How to answer a plain `query_documents` call before fastmcp is up, or None to leave it to fastmcp.

    Only arguments that the tool's input schema certainly accepts as they are (no coercion,
    no unknown keys) are taken. The returned function gives the `tools/call` result of a
    successful search and raises for anything else; the real server then runs the call
    again and reports the error as a value.
    """
    if name != "query_documents" or not isinstance(arguments, dict) or "query" not in arguments:
        return None
    for key, value in arguments.items():
        if key not in _QUERY_ARGUMENTS:
            return None
        kind, low, high = _QUERY_ARGUMENTS[key]
        if value is None and key in ("scope", "docClass"):
            continue
        if type(value) is not kind or not low <= (len(value) if kind is str else value) <= high:
            return None

    def run() -> dict[str, Any]:
        if runtime.warming:
            runtime.imported.wait()  # one thread imports the libraries at a time
        from appliance import mcp_models as m

        app = runtime.appliance()
        data = tool_data(m.SearchResults, lambda: app.search(
            arguments["query"], top_k=arguments.get("topK", 10), scope=arguments.get("scope"),
            doc_class=arguments.get("docClass")))
        return {"content": [{"type": "text", "text": result_text(data)}], "structuredContent": data,
                "isError": False}

    return run
