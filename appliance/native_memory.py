"""glibc's allocator told to hand big blocks back, so a long sync's folds do not ratchet its RSS.

A fold (store.Index.refresh_indexes) runs on LanceDB's native threads and allocates blocks of
megabytes that it frees again. glibc raises its mmap threshold after such a free, so the next
ones come from per-thread arenas that keep them once freed: over a 20,000-file sync glibc's free
lists grew from 46 to 255 MB (scripts/bench_sync_rss.py). A fixed threshold returns every block
of a MiB or more to the system when freed, and two arenas keep few high-water marks.
"""
from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 1 << 20
ARENAS = 2


def bound_malloc() -> bool:
    """Set glibc's mmap threshold and arena count for this process; False where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this interpreter is linked with
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_ARENA_MAX, ARENAS))
