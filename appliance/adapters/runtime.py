"""Settings, the Appliance and its warm-up for one server process, and how a tool result is rendered.

Nothing here imports fastmcp, LanceDB or fastembed: the Appliance (and with it the
index and model libraries) is imported by the warm-up thread or the first tool call.
"""
from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import TYPE_CHECKING

from appliance import __version__
from appliance.adapters.instructions import build_instructions
from appliance.config import Environment, Overrides, Settings
from appliance.errors import ApplianceError, ConfigError
from appliance.results import ErrorInfo, Status, StatusUnavailable

if TYPE_CHECKING:
    from appliance.service import Appliance

log = logging.getLogger("appliance.adapters.mcp_server")


class Runtime:
    """Settings and the Appliance for one server process, built on first use.

    `environment` is what the process's composition root read; `overrides` are the CLI flags
    (the keyword arguments of `Environment.settings`)."""

    def __init__(self, environment: Environment, overrides: Overrides | None = None) -> None:
        self.environment = environment
        self.overrides: Overrides = overrides or {}
        self._lock = threading.Lock()
        self._settings: Settings | None = None
        self._settings_error: ConfigError | None = None
        self._appliance: Appliance | None = None
        self._warming = False
        self.warmed = threading.Event()
        """Set once the warm-up has finished, whether or not it succeeded."""

    @classmethod
    def serving(cls, app: Appliance, environment: Environment) -> Runtime:
        """A runtime over an Appliance built elsewhere (a test's fake model, an evaluation script's index):
        its settings are the app's; `environment` is what else the server reads."""
        runtime = cls(environment)
        runtime._settings, runtime._appliance = app.settings, app
        return runtime

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
            app.warm_up()
            from appliance.sync.runner import listener

            if listener(app).start():  # warm now: a `minirag sync` beside it may hand its sync over
                log.info("taking `minirag sync` requests on this index")
        except ApplianceError:
            pass  # the first tool call reports it as a value
        except Exception:
            log.warning("warm-up failed; the first tool call will retry", exc_info=True)
        finally:
            self.warmed.set()

    def appliance(self) -> Appliance:
        with self._lock:
            if self._appliance is None:
                from appliance.service import Appliance

                self._appliance = Appliance(self.settings())
            return self._appliance

    def status(self) -> Status | StatusUnavailable:
        """The service's status, or {version, configError} when the configuration cannot be used."""
        try:
            return self.appliance().status()
        except ApplianceError as exc:
            config = None
            with contextlib.suppress(ConfigError):
                config = self.settings().describe()
            return StatusUnavailable(version=__version__, config_error=ErrorInfo.of(exc), config=config)


def result_text(data: dict[str, object]) -> str:
    """The text content that accompanies a tool's structured content."""
    return json.dumps(data, ensure_ascii=False, default=str)
