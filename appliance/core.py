"""What every operation needs: the settings, the model, the index, and paths checked against the roots."""
from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

from appliance.config import Settings
from appliance.embed import Embedder, OnnxEmbedder, load_spec
from appliance.errors import ConfigError, IndexMismatch, InvalidArgument
from appliance.ingest import formats
from appliance.ingest.chunk import SCHEME_VERSION
from appliance.ingest.discover import contained_root, resolve_in_roots
from appliance.ingest.isolate import ConvertPool
from appliance.ingest.ocr import OcrConfig
from appliance.search import dictionaries
from appliance.storage.index import Index
from appliance.storage.tables import Identity, SourceRow

MAX_SOURCE_ID_CHARS = 1024
DEFAULT_BUDGET = 256
RESERVED_TOKENS = 16
UNTRUSTED_RECYCLE = 200
"""Ingests a worker for untrusted content converts before it is replaced (bounds slow leaks)."""
"""Room in the model window beyond the budget: special tokens and the passage prefix."""


class Resources:
    """What the operations of one appliance work with: its settings, model (loaded on first use), index
    and dictionaries, and the checks of a path against the roots and of the index against the model.

    The operation modules (sync.indexing, search.hybrid, assemble.reading, health, sync.plan) take it as `core`;
    the service's Appliance holds them (`app.resources`) beside its operations, and a Ray node builds them alone."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.spec = embedder.spec if embedder is not None else load_spec(settings.model_name, settings.models_dir,
                                                                          settings.models_manifest)
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self.index = Index(settings.db_path, self.spec.dim, memory_budget=settings.replica_budget_bytes,
                           bucket=settings.bucket)
        self.dictionaries = dictionaries.activate(settings.models_dir)
        """The cross-language dictionaries, or why there are none (search then runs without translation)."""
        self._untrusted: ConvertPool | None = None
        self._untrusted_lock = threading.Lock()

    def untrusted_pool(self) -> ConvertPool:
        """One conversion worker for content from outside the roots (ingest_data, ingest_url pages),
        kept for the life of this process: the server never parses those bytes itself, and pays
        the worker's start (~3 s of imports) once, at the first such ingest."""
        with self._untrusted_lock:
            if self._untrusted is None or self._untrusted.closed:
                s = self.settings
                self._untrusted = ConvertPool(workers=1, timeout_s=s.convert_timeout_s,
                                              memory_bytes=s.convert_memory_mb * 1024 * 1024, ocr=None,
                                              max_file_size=s.max_file_size, max_tasks_per_worker=UNTRUSTED_RECYCLE,
                                              scoped=False)
            return self._untrusted

    @property
    def embedder(self) -> Embedder:
        """Loaded on first use, once, so the server starts without the model."""
        if self._embedder is None:
            with self._embedder_lock:
                if self._embedder is None:
                    self._embedder = OnnxEmbedder(self.spec, self.settings.models_dir,
                                                  threads=self.settings.embed_threads)
        return self._embedder

    @property
    def budget(self) -> int:
        budget = self.settings.chunk_token_budget or DEFAULT_BUDGET
        window = self.spec.max_seq_length - RESERVED_TOKENS
        if not 16 <= budget <= window:
            raise ConfigError(f"CHUNK_TOKEN_BUDGET must be between 16 and {window} for {self.spec.id}, not {budget}")
        return budget

    def identity(self) -> Identity:
        return Identity(model_id=self.spec.id, dim=self.spec.dim, scheme=SCHEME_VERSION, budget=self.budget)

    def identity_problem(self) -> str | None:
        """Why the index cannot be used with the current model/budget, or None."""
        stored = self.index.read_identity()
        if stored is None:
            return None
        current = self.identity()
        if (stored.model_id, stored.dim) != (current.model_id, current.dim):
            return (f"The index at {self.settings.index_location} was built with {stored.model_id} "
                    f"({stored.dim} dims), "
                    f"not the configured {current.model_id} ({current.dim} dims)")
        if stored.budget != current.budget:
            return (f"The index at {self.settings.index_location} was cut with a {stored.budget}-token budget, "
                    f"not the configured {current.budget}")
        return None

    def require_identity(self) -> None:
        problem = self.identity_problem()
        if problem:
            raise IndexMismatch(problem)

    def ocr_config(self) -> OcrConfig:
        return formats.ocr_config(self.settings)

    def extensions(self) -> frozenset[str]:
        return formats.extensions(self.settings)

    def resolve(self, path: str | Path, *, require_absolute: bool = False,
                must_exist: bool = True) -> tuple[Path, Path]:
        return resolve_in_roots(path, self.settings.roots, require_absolute=require_absolute, must_exist=must_exist)

    def foreign_roots(self, rows: Iterable[SourceRow]) -> dict[str, int]:
        """Roots of indexed files that lie under none of the configured roots, with their file counts."""
        configured = {str(r) for r in self.settings.roots}
        held: dict[str, int] = {}
        for row in rows:
            if row.source_kind == "file" and row.root and row.root not in configured \
                    and contained_root(Path(row.source_id), self.settings.roots) is None:
                held[row.root] = held.get(row.root, 0) + 1
        return held

    def check_writable_identity(self) -> None:
        problem = self.identity_problem()
        if problem:
            raise IndexMismatch(problem)
        if self.index.read_identity() is None:
            self.index.write_identity(self.identity())

    def source_id_for(self, target: str, is_source: bool, *, require_absolute: bool) -> str:
        """A file path (resolved and contained) or a data/url source id, as stored.

        Without `is_source`, a target that looks like a path is taken as one.
        """
        if not isinstance(target, str) or not target.strip():
            raise InvalidArgument("Name a file path or a source id")
        if is_source:
            return valid_source_id(target)
        if require_absolute:  # a caller that names a file path (MCP's filePath): never a source id
            return str(self.resolve(target, require_absolute=True, must_exist=False)[0])
        looks_like_path = target.startswith(("/", "~", ".")) or (os.sep in target and "://" not in target)
        if looks_like_path or Path(target).exists():
            return str(self.resolve(target, must_exist=False)[0])
        return valid_source_id(target)


def valid_source_id(source_id: str) -> str:
    if not isinstance(source_id, str) or not source_id.strip():
        raise InvalidArgument("A source id must be a non-empty string")
    if len(source_id) > MAX_SOURCE_ID_CHARS or any(ord(c) < 32 for c in source_id):
        raise InvalidArgument(
            f"A source id must be at most {MAX_SOURCE_ID_CHARS} characters without control characters")
    if source_id.startswith("/"):
        raise InvalidArgument("A data source id must not start with /; that namespace belongs to files")
    return source_id.strip()
