"""The workers' allocator settings: freed sample memory is reused, not faulted in again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A producer's allocation pattern (decode a 600 kB image, transform it, drop it), measured in
# a fresh interpreter: a forked child would inherit whatever heap the test process has.
CHILD = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    from driver.data.heap import keep_freed_memory

    applied = keep_freed_memory() if sys.argv[1] == "keep" else False

    def samples(count):
        for index in range(count):
            rng = np.random.default_rng(index)
            image = rng.integers(0, 255, (3, 224, 224), dtype=np.uint8).astype(np.float32)
            image = np.sqrt(image * 0.5 + 1.0)
            del image

    samples(40)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    samples(40)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, int(applied))
    """
)


def _page_faults(mode: str) -> tuple[int, bool]:
    """Minor page faults of 40 samples after 40 of warm-up; whether the settings applied.
    The child gets glibc's defaults: no allocator tunables or preloaded allocator."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("GLIBC_TUNABLES", "LD_PRELOAD") and not key.startswith("MALLOC_")
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], cwd=ROOT, env=env, capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    faults, applied = out.stdout.split()
    return int(faults), applied == "1"


def test_kept_heap_stops_refaulting_each_sample():
    (kept, applied), (default, _) = _page_faults("keep"), _page_faults("default")
    assert applied  # glibc
    assert kept < 40  # under one page fault a sample (a 600 kB image is ~150 pages)
    if not _huge_pages_always():  # with them the kernel may back the heap in 2 MB pages
        assert default > 10 * 40  # glibc's default hands the pages back after every sample


def _huge_pages_always() -> bool:
    try:
        return "[always]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
