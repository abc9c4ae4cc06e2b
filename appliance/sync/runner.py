"""How a sync runs, decided here once for every caller: `minirag sync`, the scheduler's rounds (its
start-up sync included), MCP sync_start, and a warm server running a sync handed to it.

A caller says what it wants (a SyncRequest) and who it is (a Caller); `run` takes the first way
that caller's Policy allows and that answers, and says which one it took (Outcome.route):

1. "stamp" (sync.stamp): a plain sync of every root that the last quiet sync's stamp proves has
   nothing to do is answered without LanceDB or the model.
2. "handoff" (handoff): a warm MCP server or daemon on the same index and inputs runs the sync.
3. "local" or "ray": the sync here (`Appliance.sync`) with the indexer this module chooses: this
   process's conversion workers, or the Ray cluster the request or RAY_ADDRESS names (this process
   still writes every row).

Who may take what (POLICIES): the CLI all three, and a Ray sync goes straight to 3 (the caller
named the cluster). The scheduler's round and sync_start replay the stamp but never hand off: a
server would hand its sync to itself, and a scheduler round is a short-lived process so that a
sync's memory leaves with it. A warm server running a hand-off neither replays (its client just
tried) nor hands off again. Only the CLI reads RAY_ADDRESS, as documented for `minirag sync`.

The service is opened only for the sync here (`open_service`), so a replayed or handed-off sync
never imports LanceDB or the model.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from appliance.config import Settings
from appliance.results import RunReport
from appliance.sync import handoff, stamp as sync_stamp

if TYPE_CHECKING:
    from appliance.models.manifest import ModelSpec
    from appliance.sync.indexing import Indexer

Progress = Callable[[str, int, int, str], None]
"""progress(phase, done, total, current_path)"""
Caller = Literal["cli", "scheduler", "mcp", "handoff"]
Route = Literal["stamp", "handoff", "local", "ray"]


@dataclass(frozen=True)
class Policy:
    """The ways a caller may take besides the sync here."""

    replay: bool
    hand_off: bool
    ray: bool
    origin: str
    """Who the running sync's progress names as its starter (state.SyncProgress)."""


POLICIES: dict[Caller, Policy] = {
    "cli": Policy(replay=True, hand_off=True, ray=True, origin="cli"),
    "scheduler": Policy(replay=True, hand_off=False, ray=False, origin="scheduler"),
    "mcp": Policy(replay=True, hand_off=False, ray=False, origin="mcp"),
    "handoff": Policy(replay=False, hand_off=False, ray=False, origin="cli"),  # a `minirag sync` asked for it
}


@dataclass(frozen=True)
class SyncRequest:
    """What a caller asks of a sync (the options of `Appliance.sync`)."""

    path: str | Path | None = None
    full: bool = False
    clean: bool = False
    discard_unrecoverable: bool = False
    forget_roots: bool = False
    allow_deletions: bool = False
    here: bool = False
    """Never hand off (`minirag sync --here`)."""
    ray_address: str | None = None
    """Convert and embed on this Ray cluster (`minirag sync --ray`; the CLI's default is RAY_ADDRESS)."""

    @property
    def plain(self) -> bool:
        """A sync of every root that only follows what changed: what a stamp or a warm server may answer."""
        return self.path is None and not (self.full or self.clean or self.forget_roots or self.allow_deletions)


@dataclass(frozen=True)
class Outcome:
    report: RunReport
    route: Route


class SyncService(Protocol):
    """What the runner needs of the service to sync here (an Appliance)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def spec(self) -> ModelSpec: ...

    def sync(self, path: str | Path | None = None, *, full: bool = False, clean: bool = False,
             discard_unrecoverable: bool = False, forget_roots: bool = False, allow_deletions: bool = False,
             progress: Progress | None = None, origin: str = "cli", indexer: Indexer | None = None) -> RunReport: ...


def run(settings: Settings, request: SyncRequest, caller: Caller, open_service: Callable[[], SyncService], *,
        progress: Progress | None = None) -> Outcome:
    """The sync `request` asks for, run the first way `caller` may take that answers (see the module)."""
    policy = POLICIES[caller]
    address = (request.ray_address or settings.ray_address) if policy.ray else None
    if request.plain and not address:
        if policy.replay:
            report = sync_stamp.replay(settings)
            if report is not None:
                return Outcome(report, "stamp")
        if policy.hand_off and not request.here:
            report = handoff.request_sync(settings, progress)
            if report is not None:
                return Outcome(report, "handoff")
    service = open_service()
    with _indexer(service, address) as indexer:
        report = service.sync(request.path, full=request.full, clean=request.clean,
                              discard_unrecoverable=request.discard_unrecoverable,
                              forget_roots=request.forget_roots, allow_deletions=request.allow_deletions,
                              progress=progress, origin=policy.origin, indexer=indexer)
    return Outcome(report, "ray" if address else "local")


@contextlib.contextmanager
def _indexer(service: SyncService, address: str | None) -> Iterator[Indexer]:
    """This process's indexer, or a RayIndexer connected to `address` for the sync."""
    if not address:
        from appliance.sync.rounds import default_indexer  # with the service: LanceDB is loaded by now

        yield default_indexer(service.settings)
        return
    from appliance.cluster.driver import ray_indexer  # the optional [cluster] extra, imported only when asked for

    with ray_indexer(service.spec, address) as indexer:
        yield indexer


def listener(service: SyncService) -> handoff.Listener:
    """What a warm server listens with for `minirag sync` hand-offs: each one runs through `run`."""
    return handoff.Listener(service.settings, lambda progress: run(
        service.settings, SyncRequest(), "handoff", lambda: service, progress=progress).report)
