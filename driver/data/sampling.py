"""Deterministic, resumable sampling schedule (pure functions, no I/O).

Every rank computes the same global schedule, a permutation of the dataset from
(seed, epoch, size), evaluated slice by slice (no per-epoch array, so corpora of billions
of samples cost nothing). From a global position `origin` onwards, step `s` covers the
`world_size × batch_size` consecutive schedule entries starting at
`origin + s × world_size × batch_size`, and rank `r` takes the r-th block of `batch_size`.
Progress is one number, the global position (samples of the epoch consumed by all ranks
together); resuming on any world size restarts the layout at that position, so no sample
of the epoch is skipped or repeated. With drop_last=False the final partial step is split
over the ranks as evenly as possible (some ranks may get one sample fewer, or none).

    start, stop = rank_slice(step=2, rank=1, size=1000, batch_size=8, world_size=4,
                             origin=0, drop_last=True)
    indices = schedule_entries(seed=0, epoch=3, size=1000, positions=np.arange(start, stop))
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

_MASK = (1 << 64) - 1


ROUNDS = 6
SCHEDULE_VERSION = "feistel-6"


def schedule_entries(
    seed: int, epoch: int, size: int, positions: np.ndarray, shuffle: bool = True
) -> np.ndarray:
    """The global schedule at `positions` (int64 sample indices), identical on every rank.

    The shuffle is a keyed bijection of [0, size) (a Feistel network on the smallest
    power-of-four domain ≥ size, cycle-walked back into range), so any slice is computed
    without materialising the epoch's permutation: constant memory for any corpus size."""
    if size < 0 or epoch < 0:
        raise ValueError(f"size and epoch must be ≥ 0 (got size={size}, epoch={epoch})")
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size and (pos.min() < 0 or pos.max() >= size):
        raise ValueError(f"schedule positions must lie in 0..{size - 1}")
    if not shuffle:
        return pos.copy()
    half = max(1, (max(size - 1, 1).bit_length() + 1) // 2)
    keys = _round_keys(seed & _MASK, epoch)
    out = _feistel(pos.astype(np.uint64), keys, half)
    outside = out >= size
    while outside.any():  # cycle-walk: at most a few rounds, the domain is < 4 × size
        out[outside] = _feistel(out[outside], keys, half)
        outside = out >= size
    return out.astype(np.int64)


@functools.lru_cache(maxsize=8)
def _round_keys(seed: int, epoch: int) -> np.ndarray:
    return np.random.SeedSequence([seed, epoch]).generate_state(ROUNDS, np.uint64)


def _feistel(x: np.ndarray, keys: np.ndarray, half: int) -> np.ndarray:
    mask = np.uint64((1 << half) - 1)
    left, right = x >> np.uint64(half), x & mask
    for key in keys:
        left, right = right, left ^ (_mix(right ^ key) & mask)
    return (left << np.uint64(half)) | right


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def epoch_permutation(seed: int, epoch: int, size: int, shuffle: bool = True) -> np.ndarray:
    """The whole schedule of one epoch (for tests and tools; the pipeline reads slices)."""
    return schedule_entries(seed, epoch, size, np.arange(size, dtype=np.int64), shuffle)


def schedule_digest(seed: int, epoch: int, size: int, shuffle: bool) -> str:
    """Short fingerprint of an epoch's schedule (its parameters, the algorithm and its first
    entries), stored with the state so a resume under a changed schedule is refused."""
    head = schedule_entries(seed, epoch, size, np.arange(min(size, 256)), shuffle)
    text = f"{SCHEDULE_VERSION}:{seed}:{epoch}:{size}:{shuffle}:".encode() + head.tobytes()
    return hashlib.sha1(text).hexdigest()[:16]


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
