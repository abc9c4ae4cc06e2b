"""The C allocator: glibc's kept from hoarding what a long sync's folds free, so its RSS does not ratchet; jemalloc
for the processes that serve queries.

A fold (storage.writes.IndexWriter.refresh_indexes) runs on LanceDB's native threads and allocates blocks of
megabytes that it frees again; glibc keeps freed blocks in per-thread arenas: over a 20,000-file
sync its free lists grew from 46 to 255 MB (scripts/bench_sync_rss.py). Two arenas keep few
high-water marks, and the heap is trimmed after each fold. (A fixed 1 MiB mmap threshold also
bounded them, but cost embedding 15-25% of its chunks/s: onnxruntime's activation buffers were
then mapped and faulted in afresh for every operator.)

A query past the replica is LanceDB's: at 1M chunks a fifth of the serving process's CPU was glibc's
malloc and free on LanceDB's threads (arena locks, consolidating free lists). Preloaded, jemalloc takes
that to a fourteenth (docs/BENCHMARKS.md), so the image preloads it (`LD_PRELOAD`, Dockerfile). A sync's
rounds index under glibc as above: their fork server starts without it (`without_jemalloc`), since
jemalloc's retained pages raised a 30,000-file sync's peak.
"""
from __future__ import annotations

import ctypes
from collections.abc import Mapping
from pathlib import Path

M_ARENA_MAX = -8
ARENAS = 2


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # the C library this interpreter is linked with
    except OSError:
        return None


def bound_malloc() -> bool:
    """Cap glibc's arenas for this process; False where the C library is not glibc."""
    mallopt = getattr(_libc(), "mallopt", None)
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, ARENAS))


def give_back() -> bool:
    """Return the free memory of glibc's heaps to the system (after a fold); False where there is no glibc."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


JEMALLOC = "libjemalloc.so.2"
"""Debian's libjemalloc2, under /usr/lib/<architecture>/; the image links it as /usr/local/lib/libjemalloc.so.2."""


def jemalloc_library() -> str | None:
    """The path of jemalloc's shared library on this machine, None when it is not installed."""
    found = [Path("/usr/local/lib", JEMALLOC), *sorted(Path("/usr/lib").glob(f"*/{JEMALLOC}"))]
    return next((str(p) for p in found if p.is_file()), None)


def allocator() -> str:
    """"jemalloc" when this process runs on it (preloaded), else "glibc" (or whatever the C library's is)."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "glibc"
    return "jemalloc" if "libjemalloc" in maps else "glibc"


def with_jemalloc(variables: Mapping[str, str]) -> dict[str, str]:
    """`variables` for a process that serves queries: jemalloc preloaded, when it is installed."""
    library = jemalloc_library()
    preload = [p for p in variables.get("LD_PRELOAD", "").split() if p]
    if library is None or any(JEMALLOC in p for p in preload):
        return dict(variables)
    return {**variables, "LD_PRELOAD": " ".join([library, *preload])}


def without_jemalloc(variables: Mapping[str, str]) -> dict[str, str]:
    """`variables` for a process that indexes: glibc's allocator, with the bounds above."""
    preload = [p for p in variables.get("LD_PRELOAD", "").split() if p and JEMALLOC not in p]
    rest = {k: v for k, v in variables.items() if k != "LD_PRELOAD"}
    return {**rest, "LD_PRELOAD": " ".join(preload)} if preload else rest
