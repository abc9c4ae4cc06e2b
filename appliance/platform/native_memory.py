"""glibc's allocator kept from hoarding what a long sync's folds free, so its RSS does not ratchet.

A fold (storage.writes.IndexWriter.refresh_indexes) runs on LanceDB's native threads and allocates blocks of
megabytes that it frees again; glibc keeps freed blocks in per-thread arenas: over a 20,000-file
sync its free lists grew from 46 to 255 MB (scripts/bench_sync_rss.py). Two arenas keep few
high-water marks, and the heap is trimmed after each fold. (A fixed 1 MiB mmap threshold also
bounded them, but cost embedding 15-25% of its chunks/s: onnxruntime's activation buffers were
then mapped and faulted in afresh for every operator.)
"""
from __future__ import annotations

import ctypes

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
