"""Keep the index libraries from importing what the appliance never uses.

Two mechanisms, each active only for the imports the thread inside the block makes
(another thread importing at the same moment is not affected):

* Hiding pandas. `pyarrow.dataset`, which lancedb imports, probes whether pandas
  is installed by importing all of it: about 1.3 s of CPU and ~60 MB in every
  process that opens the index, although the index code never builds a DataFrame.
  Only the spreadsheet converter needs pandas, and it imports pandas itself when
  it runs (it is not affected: the probe is hidden only while lancedb is being
  imported). pyarrow then treats pandas as absent, which only matters for
  `to_pandas()`, a call the appliance does not make.

* Deferring a package's `__init__`. Some packages' `__init__` eagerly imports
  everything the package has, although the code we run imports only some of its
  submodules by their full names. For the packages in a deferral set the module
  object is created (with `__path__`, so submodules import as usual) but its
  `__init__` runs only when an attribute the module does not have yet is looked
  up (`from pkg import Name`, `pkg.Name`, `pkg.__all__`), by whichever thread looks
  it up first: then it runs in full, in the same module object, and the lookup
  proceeds as if it had always run. Nothing is stubbed and nothing is left out;
  only the moment changes.

  - `lance_namespace_urllib3_client`: the OpenAPI-generated REST client of Lance
    namespaces. Its `__init__` imports all nine REST API modules (hundreds of
    pydantic-validated methods, urllib3, dateutil): about 1 s of CPU. lancedb and
    `lance_namespace` import only its `.models` subpackage, and a local directory
    (`lancedb.connect(path)`) never calls the REST client.

  (Deferring fastembed's own `__init__`, which imports its image, sparse and
  late-interaction families, was measured too and gained nothing: the text model's
  `fastembed.common.model_management` imports huggingface_hub, requests, httpx and,
  through `fastembed.common.types`, PIL by name at module level anyway.)

One finder serves every block: it is put first on `sys.meta_path` once, when this
module is imported, and never removed (taking a finder off the list while another
thread walks it could make that thread skip the next finder). Outside a block, and
in every other thread, it answers "not mine" at once.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

LANCEDB_DEFERRED = frozenset({"lance_namespace_urllib3_client"})
"""Packages whose `__init__` waits while lancedb is imported (see the module docstring)."""


class _Scope(threading.local):
    """What the current thread's innermost block asks for."""

    hidden: frozenset[str] = frozenset()
    deferred: frozenset[str] = frozenset()


_scope = _Scope()


class _DeferredInit(importlib.abc.Loader):
    """Creates the package module now; runs the real loader's exec_module on the first missing attribute."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        real = self.real
        lock = threading.RLock()

        def __getattr__(name: str) -> Any:
            with lock:
                if module.__dict__.get("__getattr__") is __getattr__:
                    # From here on the module behaves as if imported normally; a reentrant lookup
                    # during the real __init__ sees a partly initialised module, as it would anyway.
                    del module.__dict__["__getattr__"]
                    module.__loader__ = real
                    if module.__spec__ is not None:
                        module.__spec__.loader = real
                    try:
                        real.exec_module(module)
                    except BaseException:
                        sys.modules.pop(module.__name__, None)  # as a failed import would leave it
                        raise
            return getattr(module, name)  # missing even after the real __init__: AttributeError as usual

        __getattr__.__deferred__ = True  # type: ignore[attr-defined]  # the mark is_deferred() looks for
        module.__dict__["__getattr__"] = __getattr__


class _ScopedFinder(importlib.abc.MetaPathFinder):
    """Hides or defers the names the current thread's block asks for; otherwise leaves the import alone."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        top = name.partition(".")[0]
        if top in _scope.hidden:
            raise ModuleNotFoundError(f"{top} is hidden while the index libraries load", name=name)
        if name not in _scope.deferred:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return None  # not an ordinary package: leave it to the usual machinery
        spec.loader = _DeferredInit(spec.loader)
        return spec


sys.meta_path.insert(0, _ScopedFinder())


@contextmanager
def _scoped(hidden: Iterable[str] = (), deferred: Iterable[str] = ()) -> Iterator[None]:
    outer = (_scope.hidden, _scope.deferred)
    _scope.hidden, _scope.deferred = outer[0] | frozenset(hidden), outer[1] | frozenset(deferred)
    try:
        yield
    finally:
        _scope.hidden, _scope.deferred = outer


def pandas_hidden() -> AbstractContextManager[None]:
    """Within the block this thread's `import pandas` fails, unless pandas was imported before (then nothing changes).

    Also defers the `__init__` of lancedb's REST namespace client (LANCEDB_DEFERRED): this block
    is what the storage modules (appliance/storage/tables*.py) wrap their lancedb imports in.
    """
    return _scoped(hidden={"pandas"}, deferred=LANCEDB_DEFERRED)
