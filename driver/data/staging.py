"""Staging area: producers write sample arrays into shared memory, collators read views.

Only a small spec (dtype, shape, offset; other leaves such as ints and strings) crosses the
producer → collator queue; the arrays are written once by the producer and stacked once by
the collator straight into the batch slot. A sample bigger than its staging space (a slot's
bytes divided by the batch size) travels through the queue instead, as typed frames like
every record there (driver.data.frames; never pickle). `outbound` and `inbound` turn a
producer's results into the queue's records and back: `(position, index, state, value)`
with state "staged" (value: the spec's transport form), "placed" (no value), "ok" (the
sample itself) or "failed" (the reason). Used by `driver.data.workers`; not meant to be
run on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from driver.data import codec
from driver.data.placement import Placed

OK, FAILED, STAGED, PLACED = "ok", "failed", "staged", "placed"


@dataclass(frozen=True)
class Staged:
    """A sample whose arrays a producer wrote into the staging area (only the spec travels)."""

    spec: Any


def staging_region(cfg: Any, slot: int, pos: int) -> tuple[int, int]:
    """(offset, size) of the staging space of sample `pos` of the step using batch `slot`.

    The arena holds `prefetch_batches` batch slots, then as many staging slots; staging slot
    s is free exactly when batch slot s is, so it needs no bookkeeping of its own."""
    stride = cfg.slot_bytes // cfg.batch_size // codec.ALIGN * codec.ALIGN
    return (cfg.prefetch_batches + slot) * cfg.slot_bytes + pos * stride, stride


def stage_out(shared: Any, slot: int, pos: int, value: Any) -> Any:
    """In a producer: write the arrays of `value` into its staging space if they fit."""
    spec, arrays, nbytes = codec.encode(value)
    start, stride = staging_region(shared.config, slot, pos)
    if not arrays or nbytes > stride:  # nothing to gain, or too big: pickled through the queue
        return value
    codec.write(arrays, spec, shared.shm.buf[start : start + nbytes])
    return Staged(spec)


def outbound(results: list[tuple]) -> list[tuple]:
    """A producer's `(pos, index, state, value)` results as the queue's records."""
    out = []
    for pos, index, state, value in results:
        if state == OK and isinstance(value, Staged):
            out.append((pos, index, STAGED, codec.spec_out(value.spec)))
        elif state == OK and isinstance(value, Placed):
            out.append((pos, index, PLACED, None))
        else:
            out.append((pos, index, state, value))
    return out


def unsendable(records: list[tuple]) -> list[tuple]:
    """`records` with each sample that cannot travel as typed frames made a failed one
    (its reason names the sample's type), for a put that raised TypeError."""
    out = []
    for pos, index, state, value in records:
        if state == OK:
            try:
                codec.to_frames(value)
            except TypeError as err:
                state, value = FAILED, f"sample cannot go between the pipeline's processes: {err}"
        out.append((pos, index, state, value))
    return out


def inbound(state: str, value: Any) -> tuple[str, Any]:
    """A queue record's (state, value) as the collator works with them: OK with a sample
    (`Staged`, `Placed` or the value), or FAILED with the reason."""
    if state == STAGED:
        return OK, Staged(codec.spec_in(value))
    if state == PLACED:
        return OK, Placed()
    if state in (OK, FAILED):
        return state, value
    raise ValueError(f"sample record in state {state!r}")


def stage_in(shared: Any, slot: int, pos: int, value: Any) -> Any:
    """In a collator: the sample as views on its staging space (or as it came)."""
    if not isinstance(value, Staged):
        return value
    start, stride = staging_region(shared.config, slot, pos)
    return codec.decode(value.spec, np.frombuffer(shared.shm.buf, np.uint8, stride, start))
