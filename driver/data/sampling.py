"""Deterministic, resumable sampling schedule (pure functions, no I/O).

Every rank computes the same global schedule, a permutation of the dataset from
(seed, epoch, size). From a global position `origin` onwards, step `s` covers the
`world_size × batch_size` consecutive schedule entries starting at
`origin + s × world_size × batch_size`, and rank `r` takes the r-th block of `batch_size`.
Progress is one number, the global position (samples of the epoch consumed by all ranks
together); resuming on any world size restarts the layout at that position, so no sample
of the epoch is skipped or repeated. With drop_last=False the final partial step is split
over the ranks as evenly as possible (some ranks may get one sample fewer, or none).

    perm = epoch_permutation(seed=0, epoch=3, size=1000)
    for idx in rank_batches(perm, batch_size=8, world_size=4, rank=1): ...
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np

_MASK = (1 << 64) - 1


def epoch_permutation(seed: int, epoch: int, size: int, shuffle: bool = True) -> np.ndarray:
    """The global schedule of one epoch: int64 sample indices, identical on every rank."""
    if size < 0 or epoch < 0:
        raise ValueError(f"size and epoch must be ≥ 0 (got size={size}, epoch={epoch})")
    if not shuffle:
        return np.arange(size, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed & _MASK, epoch])))
    return rng.permutation(size).astype(np.int64, copy=False)


def schedule_digest(perm: np.ndarray) -> str:
    """Short fingerprint of a schedule, stored with the state to detect a changed schedule."""
    return hashlib.sha1(np.ascontiguousarray(perm, dtype="<i8").tobytes()).hexdigest()[:16]


def steps_in_epoch(
    size: int, batch_size: int, world_size: int, origin: int, drop_last: bool
) -> int:
    """Steps (batches per rank) left in the epoch from global position `origin`."""
    _check(batch_size, world_size, origin, size)
    remaining = size - origin
    full, tail = divmod(remaining, batch_size * world_size)
    return full + (1 if tail and not drop_last else 0)


def rank_slice(
    step: int, rank: int, size: int, batch_size: int, world_size: int, origin: int, drop_last: bool
) -> tuple[int, int]:
    """[start, stop) into the epoch's schedule for `rank` at `step` counted from `origin`."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world size {world_size}")
    if not 0 <= step < steps_in_epoch(size, batch_size, world_size, origin, drop_last):
        raise ValueError(f"step {step} is past the end of the epoch")
    glob = batch_size * world_size
    base = origin + step * glob
    remaining = size - base
    if remaining >= glob:
        start = base + rank * batch_size
        return start, start + batch_size
    share, extra = divmod(remaining, world_size)
    start = base + rank * share + min(rank, extra)
    return start, start + share + (1 if rank < extra else 0)


def position_after(
    steps: int, size: int, batch_size: int, world_size: int, origin: int, drop_last: bool
) -> int:
    """Global position after all ranks consumed `steps` steps from `origin`."""
    total = steps_in_epoch(size, batch_size, world_size, origin, drop_last)
    if not 0 <= steps <= total:
        raise ValueError(f"{steps} steps is outside 0..{total}")
    return min(size, origin + steps * batch_size * world_size)


def rank_batches(
    perm: np.ndarray,
    batch_size: int,
    world_size: int,
    rank: int,
    origin: int = 0,
    drop_last: bool = True,
    first_step: int = 0,
) -> Iterator[np.ndarray]:
    """The sample indices of each of `rank`'s batches from `first_step` to the epoch's end."""
    size = len(perm)
    for step in range(first_step, steps_in_epoch(size, batch_size, world_size, origin, drop_last)):
        start, stop = rank_slice(step, rank, size, batch_size, world_size, origin, drop_last)
        yield perm[start:stop]


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for a sample's random transforms: same on resume, any rank or worker."""
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + index) & _MASK
    for mult in (0xBF58476D1CE4E5B9, 0x94D049BB133111EB):
        x = ((x ^ (x >> 31)) * mult) & _MASK
    return (x ^ (x >> 29)) >> 1


def _check(batch_size: int, world_size: int, origin: int, size: int) -> None:
    if batch_size < 1 or world_size < 1:
        raise ValueError(f"batch_size and world_size must be ≥ 1 ({batch_size}, {world_size})")
    if not 0 <= origin <= size:
        raise ValueError(f"position {origin} is outside the epoch of {size} samples")
