"""Direct placement: producers write each sample straight into its rows of the batch slot.

With the default collation a batch is every leaf of the samples stacked along a new first
axis. When a sample is made only of arrays (of a plain dtype) and numbers, in dicts, lists
and tuples, its place in the batch is known before the other samples exist: leaf k of the
sample at position p of a step of n samples goes to offset(k, n) + p × (its bytes). A
producer writes it there and the collator only names the batch: one copy per sample instead
of two (into staging, then stacked into the batch) and no collation work.

Every producer of a pipeline uses one layout: the signature (structure, dtypes, shapes) of
the first sample any of them placed, recorded under a lock in a small region after the batch
and staging slots, as JSON (never pickle: the region is shared memory; what is read back is
checked, and its nesting bounded before it is parsed). A sample with another signature is
staged as before. The collator names the batch without a copy only when every sample of
the step was placed and none skipped; otherwise it rebuilds the placed samples as copies
and collates the step as before, so a batch never depends on the path its samples took.
Used by `driver.data.workers`.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import numpy as np

from driver.data.codec import ALIGN, ArrayRef, refs
from driver.messaging.limits import WireError
from driver.messaging.limits import loads as bounded_loads

RECORD_BYTES = 1 << 16
"""The agreed signature's region (after the batch and staging slots)."""


class Placed:
    """A sample a producer wrote into its rows of the batch slot (nothing else travels)."""

    __slots__ = ()


def arena_bytes(cfg: Any) -> int:
    """Shared memory of one pipeline: batch slots, as many staging slots, the record."""
    return 2 * cfg.slot_bytes * cfg.prefetch_batches + RECORD_BYTES


def signature(node: Any) -> tuple | None:
    """The sample's structure, leaf dtypes and shapes; None when it cannot be placed."""
    if isinstance(node, dict):
        items = tuple((key, signature(value)) for key, value in node.items())
        return None if any(sig is None for _, sig in items) else ("dict", items)
    if type(node) in (list, tuple):
        parts = tuple(signature(value) for value in node)
        return None if any(sig is None for sig in parts) else (type(node).__name__, parts)
    if isinstance(node, np.ndarray):
        return None if node.dtype.hasobject else ("array", node.dtype.str, node.shape)
    if isinstance(node, bool | int | float | np.number | np.bool_):
        dtype = np.asarray([node]).dtype
        kind = "scalar" if isinstance(node, np.generic) else "number"  # numpy's or Python's
        return None if dtype.hasobject else (kind, dtype.str, ())
    return None


def layout(sig: tuple, count: int) -> tuple[Any, int]:
    """(spec, bytes) of the batch of `count` samples of signature `sig`, as `codec` lays
    out the stacked batch: one ArrayRef per leaf, shape (count, *leaf shape), aligned."""
    offset = 0

    def walk(node: tuple) -> Any:
        nonlocal offset
        kind = node[0]
        if kind == "dict":
            return {key: walk(value) for key, value in node[1]}
        if kind in ("list", "tuple"):
            parts = [walk(value) for value in node[1]]
            return parts if kind == "list" else tuple(parts)
        dtype, shape = np.dtype(node[1]), node[2]
        nbytes = count * dtype.itemsize * math.prod(shape)
        ref = ArrayRef(offset, nbytes, node[1], (count, *shape), "numpy")
        offset += -(-nbytes // ALIGN) * ALIGN
        return ref

    spec = walk(sig)
    return spec, offset


def rows(node: Any) -> list[np.ndarray]:
    """The bytes of each leaf of a placeable sample, in `layout`'s order."""
    if isinstance(node, dict):
        return [row for value in node.values() for row in rows(value)]
    if type(node) in (list, tuple):
        return [row for value in node for row in rows(value)]
    if isinstance(node, np.ndarray):
        return [np.ascontiguousarray(node).reshape(-1).view(np.uint8)]
    return [np.asarray([node]).view(np.uint8)]


def rebuild(sig: tuple, slot_view: np.ndarray, count: int, pos: int) -> Any:
    """A copy of the placed sample at `pos` of a step of `count` (for the collator's slow
    path, which writes the batch over the rows it reads)."""
    spec, _ = layout(sig, count)

    def walk(node: tuple, ref_spec: Any) -> Any:
        kind = node[0]
        if kind == "dict":
            return {key: walk(value, ref_spec[key]) for key, value in node[1]}
        if kind in ("list", "tuple"):
            parts = [walk(value, sub) for value, sub in zip(node[1], ref_spec, strict=True)]
            return parts if kind == "list" else tuple(parts)
        row = ref_spec.nbytes // count
        raw = slot_view[ref_spec.offset + pos * row : ref_spec.offset + (pos + 1) * row]
        value = raw.view(np.dtype(node[1]))
        if kind == "number":
            return value[0].item()  # a Python int, float or bool, as the sample had it
        return value[0].copy() if kind == "scalar" else value.reshape(node[2]).copy()

    return walk(sig, spec)


class Placer:
    """Per process: the pipeline's agreed signature, and the writes into the batch slots.
    Thread-safe (a producer's fetch threads share it): `agreed` is set once, never reset."""

    def __init__(self, shared: Any):
        self.shared = shared
        self.agreed: tuple | None = None
        self.closed = not getattr(shared, "place", False)
        self._layouts: dict[int, tuple[list[ArrayRef], int]] = {}  # count: agreed layout
        self._lock = threading.Lock()

    def agreed_for(self, sig: tuple | None) -> tuple | None:
        """The pipeline's signature, learnt (or recorded as `sig`) on first use; None when
        there is none yet (sig None) or placement is off in this process."""
        if self.agreed is None and not self.closed:
            with self._lock:
                if self.agreed is None and not self.closed:
                    found = self.agree(sig)
                    if found is not None:
                        self.agreed = found
                    elif sig is not None:  # too big to record: stage everything here
                        self.closed = True
        return self.agreed

    def layout(self, count: int) -> tuple[list[ArrayRef], int]:
        """The agreed signature's leaf refs and bytes for a step of `count` (cached)."""
        if count not in self._layouts:
            spec, nbytes = layout(self.agreed, count)
            self._layouts[count] = refs(spec), nbytes
        return self._layouts[count]

    def slot_view(self, slot: int) -> np.ndarray:
        size = self.shared.config.slot_bytes
        return np.frombuffer(self.shared.shm.buf, np.uint8, size, slot * size)

    def place(self, slot: int, pos: int, count: int, sample: Any) -> Placed | None:
        """Write `sample` into its rows of the batch in `slot`; None when it cannot be."""
        if self.closed:
            return None
        sig = signature(sample)
        if sig is None or sig != self.agreed_for(sig):
            return None
        leaves, nbytes = self.layout(count)
        if nbytes > self.shared.config.slot_bytes:
            return None
        target = self.slot_view(slot)
        for ref, raw in zip(leaves, rows(sample), strict=True):
            start = ref.offset + pos * raw.nbytes
            target[start : start + raw.nbytes] = raw
        return Placed()

    def agree(self, sig: tuple | None) -> tuple | None:
        """The pipeline's signature: the recorded one, else `sig` (recorded now)."""
        shared, start = self.shared, arena_bytes(self.shared.config) - RECORD_BYTES
        buf = shared.shm.buf
        with shared.layout_lock:
            length = int.from_bytes(buf[start : start + 8], "little")
            if length == 0 and sig is not None:
                data = dump_signature(sig)
                if data is None or len(data) > RECORD_BYTES - 8:
                    return None
                buf[start + 8 : start + 8 + len(data)] = data
                buf[start : start + 8] = len(data).to_bytes(8, "little")
                length = len(data)
            if not length:
                return None
            if length > RECORD_BYTES - 8:
                raise ValueError(f"placement record of {length} bytes in {RECORD_BYTES}")
            return load_signature(bytes(buf[start + 8 : start + 8 + length]))


def dump_signature(sig: tuple) -> bytes | None:
    """The signature as JSON (its tuples as lists); None if a key is not JSON-able."""
    try:
        return json.dumps(sig, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError):
        return None


def load_signature(data: bytes) -> tuple:
    """The signature of `dump_signature`'s JSON (every list a tuple again, as `signature`
    builds only tuples); ValueError if it is not one."""
    try:
        sig = _tuples(bounded_loads(data.decode()))
    except (WireError, UnicodeDecodeError) as err:
        raise ValueError(f"placement record: {err}") from None
    if not _well_formed(sig):
        raise ValueError("placement record: not a sample signature")
    return sig


def _tuples(node: Any) -> Any:
    return tuple(_tuples(v) for v in node) if isinstance(node, list) else node


def _well_formed(sig: Any) -> bool:
    """A signature as `signature` makes them (plain dtypes: never Python objects)."""
    if not isinstance(sig, tuple) or not sig:
        return False
    kind = sig[0]
    if kind == "dict" and len(sig) == 2 and isinstance(sig[1], tuple):
        return all(isinstance(p, tuple) and len(p) == 2 and _well_formed(p[1]) for p in sig[1])
    if kind in ("list", "tuple") and len(sig) == 2 and isinstance(sig[1], tuple):
        return all(_well_formed(part) for part in sig[1])
    if kind in ("array", "number", "scalar") and len(sig) == 3 and isinstance(sig[1], str):
        shape_ok = isinstance(sig[2], tuple) and all(type(n) is int and n >= 0 for n in sig[2])
        try:
            return shape_ok and len(sig[1]) <= 64 and not np.dtype(sig[1]).hasobject
        except (TypeError, ValueError, SyntaxError):
            return False
    return False
