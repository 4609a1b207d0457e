"""Memory allocator settings of the pipeline's worker processes.

glibc returns freed memory at the top of its heap to the kernel once more than a threshold
is free. A producer allocates and frees one large sample after another (decoded images,
their transforms), so with the defaults it hands the same pages back after every sample and
faults them in again for the next: measured on 600 kB images, ~200 page faults and a third
of the producer's CPU time per sample, and thousands of `brk` calls a second. Worker
processes call `keep_freed_memory()` when they start: they keep up to `HEAP_KEEP_BYTES` of
freed heap for reuse, and take allocations below `MMAP_BYTES` from the heap (setting either
turns glibc's adaptive threshold off, which would otherwise leave it at 128 kB, where every
large sample is a fresh mapping). The cost: a worker may hold that much freed memory per
malloc arena (glibc gives threads their own arenas: about one per fetch thread), and a
long-lived allocation in the heap keeps the memory below it from being returned.
"""

from __future__ import annotations

import ctypes

HEAP_KEEP_BYTES = 64 << 20
MMAP_BYTES = 32 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
    """Apply the settings to this process; False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mmap_set = mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)
    return bool(mmap_set and mallopt(_M_TRIM_THRESHOLD, HEAP_KEEP_BYTES))
