"""What runs on a cluster node, inside a Ray worker process: the model check and one unit of work.

Nothing here imports Ray: the driver wraps these functions with `ray.remote`, so they are plain
functions a test can call in-process. A unit is one file, or one dated snapshot sequence (cut
together so its de-duplication stays exact, as in a local sync). Each unit is converted in the
appliance's own isolated converter process (time and memory limits), cut and embedded with the
indexing module's own public steps (`prepare`, `embedding`) (vectors already in the index are reused), and
returned to the driver, which alone writes. A document's chunks are embedded in one call, so
its vectors do not depend on which other files share a node or a task.

Per worker process the node's model is verified once against the driver's manifest hashes
and loaded once; the converter process stays up between tasks.
"""
from __future__ import annotations

import hashlib
import os
import socket
import threading
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import appliance
from appliance import __version__
from appliance.cluster import NodeMismatch
from appliance.errors import ApplianceError
from appliance.ingest.chunk import SCHEME_VERSION

if TYPE_CHECKING:
    from appliance.config import Settings
    from appliance.core import Resources
    from appliance.ingest.isolate import ConvertPool
    from appliance.models.manifest import ModelSpec
    from appliance.results import FileProblem
    from appliance.storage.tables import SourceRow
    from appliance.sync.pipeline import Work


@dataclass(frozen=True)
class Fingerprint:
    """What a node must share with the driver for its vectors to be mixed into one index."""

    version: str
    code: str
    """A digest of the appliance's own source files: a node running patched code is refused too."""
    scheme: str
    model_id: str
    dim: int
    files: tuple[tuple[str, str], ...]
    """(baked file, sha256) from the manifest, sorted."""

    @classmethod
    def of(cls, spec: ModelSpec) -> Fingerprint:
        return cls(version=__version__, code=code_digest(), scheme=SCHEME_VERSION, model_id=spec.id, dim=spec.dim,
                   files=tuple(sorted(spec.files.items())))

    def difference(self, other: Fingerprint) -> str | None:
        """What differs between the driver's (self) and a node's (other) fingerprint, or None."""
        for name in ("version", "code", "scheme", "model_id", "dim"):
            if getattr(self, name) != getattr(other, name):
                return f"{name} {getattr(other, name)!r}, the driver's is {getattr(self, name)!r}"
        if self.files != other.files:
            theirs = dict(other.files)
            changed = [name for name, digest in self.files if theirs.get(name) != digest]
            return f"a manifest whose hashes differ for {', '.join(changed) or 'its file list'}"
        return None


@cache
def code_digest() -> str:
    """sha256 over the appliance package's Python files (relative path and bytes), in path order."""
    package = Path(appliance.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class NodeInfo:
    host: str
    pid: int
    models_dir: str
    package: str
    """Where this node imports the appliance from."""


@dataclass
class Unit:
    """Files to index together: one file, or a snapshot sequence in date order (`dates`)."""

    sources: list[SourceRow]
    dates: list[str] | None = None


@dataclass
class UnitResult:
    works: list[Work]
    """Converted documents with embedded rows, and the failed files' records: the driver writes them."""
    converted: list[str]
    """source ids converted (added or updated)."""
    failed: list[FileProblem] = field(default_factory=list)
    """Files that failed conversion (recorded as failed, like a local sync)."""
    embedded: int = 0
    reused: int = 0
    host: str = ""


_LOCK = threading.Lock()
_VERIFIED: dict[Fingerprint, NodeInfo] = {}
_STATE: dict[tuple[Fingerprint, Settings, int], tuple[Resources, ConvertPool]] = {}


def node_models() -> tuple[Path, Path | None]:
    """This node's MODELS_DIR and MODELS_MANIFEST: a Ray worker is a composition root of its own."""
    from appliance.config import read_environment
    from appliance.models.manifest import default_models_dir

    env = read_environment()
    models_dir = Path(env.models_dir).expanduser() if env.models_dir else default_models_dir()
    return models_dir, env.models_manifest


def check_node(expected: Fingerprint) -> NodeInfo:
    """Verify this node's baked model against the driver's fingerprint (every file re-hashed, once
    per process); raises NodeMismatch naming the node and what differs."""
    with _LOCK:
        known = _VERIFIED.get(expected)
        if known is not None:
            return known
        from appliance.models.bake import check_baked
        from appliance.models.manifest import load_spec

        host = socket.gethostname()
        models_dir, manifest = node_models()
        try:
            spec = load_spec(expected.model_id, models_dir, manifest)
            problem = expected.difference(Fingerprint.of(spec))
            if problem is None:
                check_baked(spec, models_dir, full=True)
        except ApplianceError as exc:
            problem = f"{exc.code}: {exc.message}"
        if problem:
            raise NodeMismatch(f"Node {host} (MODELS_DIR {models_dir}) is refused: {problem}")
        info = NodeInfo(host=host, pid=os.getpid(), models_dir=str(models_dir),
                        package=str(Path(appliance.__file__).parent))
        _VERIFIED[expected] = info
        return info


def _node_state(expected: Fingerprint, settings: Settings, threads: int) -> tuple[Resources, ConvertPool]:
    """The appliance's core on this node (the driver's settings with this node's model folder) and its
    converter process, made once per worker process."""
    info = check_node(expected)
    key = (expected, settings, threads)
    with _LOCK:
        state = _STATE.get(key)
        if state is None:
            from appliance.core import Resources
            from appliance.embed import OnnxEmbedder
            from appliance.models.manifest import load_spec
            from appliance.sync import indexing

            models_dir, manifest = node_models()
            mine = replace(settings, models_dir=Path(info.models_dir), models_manifest=manifest, convert_workers=1,
                           embed_threads=threads)
            embedder = OnnxEmbedder(load_spec(expected.model_id, models_dir, manifest), models_dir, threads=threads)
            core = Resources(mine, embedder=embedder)
            state = (core, indexing.conversion_pool(core))
            _STATE[key] = state
    return state


def index_unit(expected: Fingerprint, settings: Settings, unit: Unit, reuse: bool, threads: int) -> UnitResult:
    """Convert, cut and embed one unit on this node; nothing is written here."""
    from appliance.results import FileProblem, Tally
    from appliance.sync import indexing
    from appliance.sync.pipeline import Work

    core, pool = _node_state(expected, settings, threads)
    result = UnitResult(works=[], converted=[], host=socket.gethostname())
    converted = []
    dates = []
    for n, source in enumerate(unit.sources):
        try:
            converted.append((source, pool.convert(Path(source.source_id))))
        except ApplianceError as exc:
            result.works.append(Work([indexing.failed_record(source, exc)]))
            result.failed.append(FileProblem(source.source_id, exc.code, exc.message))
            continue
        result.converted.append(source.source_id)
        if unit.dates is not None:
            dates.append(unit.dates[n])
    if converted:
        work = indexing.prepare(core, converted, snapshot_dates=dates if unit.dates is not None else None)
        tally = Tally()  # only its embedded/reused counts are used
        work.embed_with(indexing.embedding(core, tally, reuse=reuse))
        result.works.append(work)
        result.embedded, result.reused = tally.embedded, tally.reused
    return result
