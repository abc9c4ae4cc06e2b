"""The driver of `minirag sync --ray`: a local sync whose files are converted, cut and embedded by Ray tasks.

`ray_indexer` connects to the cluster first (an unreachable one fails before the sync lock is
taken or anything is written) and checks every node's baked model against the driver's manifest
(a node with another model, scheme or version is refused); the service's own `Appliance.sync`
then runs with that `RayIndexer` as its indexer (indexing.Indexer; appliance.sync.runner passes
it). The indexer submits one Ray task per unit (a file, or a snapshot sequence), keeps a bounded
number in flight, and commits the returned rows itself in batches (`IndexBatch.write`: each
source's chunks replaced, then its record), so the driver is the only writer and every commit
leaves a consistent index. A task
whose worker dies is retried by Ray (`TASK_RETRIES`); one that still fails leaves its files
unrecorded, named in the report, and the next sync indexes them. A stop of the process
(SIGTERM, Ctrl-C) cancels what is in flight after writing what has arrived.
"""
from __future__ import annotations

import contextlib
import socket
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.cluster import ClusterUnavailable, ClusterUnreachable, NodeMismatch
from appliance.cluster.node import Fingerprint, NodeInfo, Unit, UnitResult, check_node, index_unit
from appliance.errors import ApplianceError
from appliance.platform import netguard, stopping
from appliance.results import FileProblem, RunReport, Tally
from appliance.storage.tables import SourceRow

if TYPE_CHECKING:
    from appliance.core import Resources
    from appliance.ingest.discover import FoundFile
    from appliance.ingest.snapshots import Member
    from appliance.models.manifest import ModelSpec
    from appliance.sync.indexing import IndexBatch, Progress
    from appliance.sync.pipeline import Work

WRITE_CHUNKS = 512
"""Chunks the driver gathers before a commit (scripts/bench_ray.py measures the commit rate)."""
WRITE_SECONDS = 5.0
"""…or the age of the oldest result waiting to be written, whichever comes first."""
IN_FLIGHT_PER_CPU = 4
"""Tasks submitted per cluster CPU: enough to keep every node busy while results wait to be written."""
TASK_RETRIES = 3
"""Ray re-runs a task whose worker or node died this many times; conversion errors are never retried."""
CONNECT_TIMEOUT_S = 10.0


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ClusterUnavailable(f"`sync --ray` needs Ray, which is not installed ({exc})") from exc
    return ray


def _check_reachable(address: str) -> None:
    """A HOST:PORT address answers a TCP connect (Ray itself retries an unreachable GCS for minutes)."""
    if address in ("auto", "local") or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ClusterUnreachable(f"{address!r} is not a Ray address (HOST:PORT, 'auto', 'local' or ray://HOST:PORT)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ClusterUnreachable(f"The Ray cluster at {address} does not answer ({exc.strerror or exc})") from exc


@contextlib.contextmanager
def connected(address: str, *, init_options: dict[str, Any] | None = None) -> Any:
    """Ray connected to `address` for the block (an existing connection is used as it is, and kept)."""
    ray = _ray()
    if ray.is_initialized():
        yield ray
        return
    host = address.rpartition("://")[2].rpartition(":")[0]
    if host:
        netguard.permit_cluster([host])  # naming a cluster is the opt-in to reach it
    _check_reachable(address)
    try:
        with warnings.catch_warnings():  # Ray forks and execs its own processes; lancedb warns about any fork
            warnings.filterwarnings("ignore", message="lancedb fork support")
            ray.init(address=address, logging_level="WARNING", log_to_driver=False, configure_logging=False,
                     **(init_options or {}))
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
        raise ClusterUnreachable(f"Cannot connect to the Ray cluster at {address}: {exc}") from exc
    try:
        netguard.permit_cluster(node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive"))
        yield ray
    finally:
        ray.shutdown()


def check_nodes(ray: Any, expected: Fingerprint) -> list[NodeInfo]:
    """Run the model check on every live node with CPUs; NodeMismatch names the first refused node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    check = ray.remote(check_node)
    refs = [check.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
            .remote(expected) for node in ray.nodes()
            if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0]
    if not refs:
        raise ClusterUnreachable("The Ray cluster has no live node with CPUs to run tasks on")
    try:
        return list(ray.get(refs))
    except ray.exceptions.RayTaskError as exc:
        raise _cause(exc) from exc


def _cause(exc: Any) -> BaseException:
    """The ApplianceError a task raised (Ray wraps it), else the Ray error itself."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, ApplianceError) else exc


@dataclass
class RayIndexer:
    """The indexing.Indexer of a sync on a cluster: units out to Ray tasks, rows back, written here in batches."""

    ray: Any
    expected: Fingerprint
    cpus_per_task: int = 1
    nodes: list[NodeInfo] = field(default_factory=list)
    writes: int = 0
    write_seconds: float = 0.0

    def index(self, batch: IndexBatch) -> None:
        known, report, on_file = batch.known, batch.report, batch.on_file
        units = self.units(batch.todo, batch.members)
        task = self.ray.remote(index_unit).options(num_cpus=self.cpus_per_task, max_retries=TASK_RETRIES,
                                                   retry_exceptions=False)
        cpus = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        limit = max(2, IN_FLIGHT_PER_CPU * cpus // max(1, self.cpus_per_task))
        waiting = list(reversed(units))
        in_flight: dict[Any, Unit] = {}
        pending: list[Work] = []
        pending_since: float | None = None
        done = 0
        total = sum(len(u.sources) for u in units)
        try:
            while waiting or in_flight:
                while waiting and len(in_flight) < limit:
                    unit = waiting.pop()
                    in_flight[task.remote(self.expected, batch.core.settings, unit, batch.reuse,
                                          self.cpus_per_task)] = unit
                ready, _ = self.ray.wait(list(in_flight), num_returns=1, timeout=1.0)
                if ready:  # whatever else finished meanwhile, too
                    ready, _ = self.ray.wait(list(in_flight), num_returns=len(in_flight), timeout=0)
                for ref in ready:
                    unit = in_flight.pop(ref)
                    result = self._result(ref, unit, report)
                    if result is not None:
                        self._count(result, known, report)
                        pending.extend(result.works)
                        pending_since = pending_since or time.monotonic()
                    done += len(unit.sources)
                    if on_file:
                        on_file(done, total, unit.sources[-1].source_id)
                due = pending_since is not None and time.monotonic() - pending_since >= WRITE_SECONDS
                if pending and (due or sum(len(w.rows) for w in pending) >= WRITE_CHUNKS or not in_flight):
                    self._write(pending, batch)
                    pending, pending_since = [], None
                stopping.check()
        except BaseException:
            for ref in in_flight:
                with contextlib.suppress(Exception):
                    self.ray.cancel(ref, force=True)
            if pending:  # every result here is complete and verified: keep it
                self._write(pending, batch)
            raise

    @staticmethod
    def units(todo: Sequence[tuple[FoundFile, str]], members: dict[Path, Member]) -> list[Unit]:
        """One unit per file, and one per snapshot sequence (its members in date order), in path order."""
        units: list[Unit] = []
        sequences: dict[str, list[tuple[str, SourceRow]]] = {}
        for f, digest in sorted(todo, key=lambda item: str(item[0].path)):
            source = SourceRow(source_id=str(f.path), source_kind="file", root=str(f.root), path=f.display,
                               content_hash=digest, mtime_ns=f.mtime_ns, size=f.size)
            member = members.get(f.path)
            if member is None:
                units.append(Unit([source]))
            else:
                sequences.setdefault(member.group, []).append((member.date, source))
        for sequence in sequences.values():
            ordered = sorted(sequence, key=lambda item: item[0])
            units.append(Unit([s for _d, s in ordered], [d for d, _s in ordered]))
        return units

    def _result(self, ref: Any, unit: Unit, report: Tally) -> UnitResult | None:
        """The task's result; None when Ray lost it for good (its files are left to the next sync)."""
        try:
            result: UnitResult = self.ray.get(ref)
            return result
        except self.ray.exceptions.RayTaskError as exc:
            cause = _cause(exc)
            if isinstance(cause, ApplianceError):
                raise cause from None  # a refused node, a broken model: stop, never mix
            raise
        except self.ray.exceptions.RayError as exc:  # worker or node died more often than TASK_RETRIES
            for source in unit.sources:
                report.failed.append(FileProblem(source.source_id, "cluster_task_lost",
                                                 f"the Ray task was lost ({type(exc).__name__}); "
                                                 "the next sync indexes this file"))
            return None

    @staticmethod
    def _count(result: UnitResult, known: dict[str, SourceRow], report: Tally) -> None:
        for source_id in result.converted:
            if source_id in known:
                report.updated += 1
            else:
                report.added += 1
        report.failed.extend(result.failed)
        report.embedded += result.embedded
        report.reused += result.reused

    def _write(self, works: list[Work], batch: IndexBatch) -> None:
        started = time.perf_counter()
        batch.write(works)
        self.write_seconds += time.perf_counter() - started
        self.writes += 1


@contextlib.contextmanager
def ray_indexer(spec: ModelSpec, address: str, *, cpus_per_task: int = 1,
                init_options: dict[str, Any] | None = None) -> Iterator[RayIndexer]:
    """A RayIndexer on the cluster at `address` for the block: connected, and every node's model checked
    against `spec` (the driver's), so an unreachable cluster or a refused node fails before a sync takes
    its lock.

    `init_options` go to `ray.init` (tests and benchmarks start a local cluster with address "local"
    and num_cpus)."""
    expected = Fingerprint.of(spec)
    with connected(address, init_options=init_options) as ray:
        yield RayIndexer(ray, expected, cpus_per_task=cpus_per_task, nodes=check_nodes(ray, expected))


def sync_on_ray(core: Resources, address: str, *, path: str | Path | None = None, full: bool = False,
                clean: bool = False, discard_unrecoverable: bool = False, forget_roots: bool = False,
                allow_deletions: bool = False, progress: Progress | None = None, origin: str = "cli",
                cpus_per_task: int = 1,
                init_options: dict[str, Any] | None = None,
                indexer_out: list[RayIndexer] | None = None) -> RunReport:
    """`indexing.sync(core, ...)` with a `ray_indexer` on the cluster at `address` (tests and benchmarks;
    the adapters go through appliance.sync.runner); `indexer_out` receives the indexer (its write figures)."""
    from appliance.sync import indexing

    with ray_indexer(core.spec, address, cpus_per_task=cpus_per_task, init_options=init_options) as indexer:
        if indexer_out is not None:
            indexer_out.append(indexer)
        return indexing.sync(core, path, full=full, clean=clean, discard_unrecoverable=discard_unrecoverable,
                             forget_roots=forget_roots, allow_deletions=allow_deletions, progress=progress,
                             origin=origin, indexer=indexer)


__all__ = ["NodeMismatch", "RayIndexer", "check_nodes", "connected", "ray_indexer", "sync_on_ray"]
