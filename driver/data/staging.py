"""Staging area: producers write sample arrays into shared memory, collators read views.

Only a small spec (dtype, shape, offset; other leaves such as ints and strings) crosses the
producer → collator queue; the arrays are written once by the producer and stacked once by
the collator straight into the batch slot. A sample bigger than its staging space (a slot's
bytes divided by the batch size) travels through the queue instead, as typed frames like
every record there (driver.data.frames; never pickle). `outbound` and `inbound` turn a
producer's results into the queue's records and back: `[position, index, state, v]` with
state "staged" (the spec's transport form among the record's values), "placed" (nothing),
"ok" (the sample itself among the values) or "failed" (v: the reason). Used by
`driver.data.workers`; not meant to be run on its own.
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


def outbound(results: list[tuple]) -> tuple[list, list]:
    """A producer's `(pos, index, state, value)` results as a queue record's head part and
    values: `[pos, index, state, v]` per sample, with v the index of its value in `values`
    ("staged": the spec's transport form; "ok": the sample itself), the reason ("failed")
    or None ("placed")."""
    records: list[list] = []
    values: list[Any] = []
    for pos, index, state, value in results:
        if state != OK or isinstance(value, Placed):
            records.append([pos, index, FAILED if state != OK else PLACED, _plain(value)])
            continue
        if isinstance(value, Staged):
            state, value = STAGED, codec.spec_out(value.spec)
        records.append([pos, index, state, len(values)])
        values.append(value)
    return records, values


def _plain(value: Any) -> Any:
    return value if isinstance(value, str) else None  # a reason, or nothing (placed)


def unsendable(records: list[list], values: list) -> tuple[list, list]:
    """`records` with each sample that cannot travel as typed frames made a failed one
    (its reason names the sample's type), for a put that raised TypeError."""
    out: list[list] = []
    kept: list[Any] = []
    for pos, index, state, v in records:
        if state in (OK, STAGED):
            try:
                codec.to_frames(values[v])
            except TypeError as err:
                why = f"sample cannot go between the pipeline's processes: {err}"
                out.append([pos, index, FAILED, why])
                continue
            out.append([pos, index, state, len(kept)])
            kept.append(values[v])
        else:
            out.append([pos, index, state, v])
    return out, kept


def inbound(record: list, values: list) -> tuple[int, int, str, Any]:
    """A queue record's sample as the collator works with it: (pos, index, OK, a `Staged`,
    `Placed` or the value) or (pos, index, FAILED, the reason)."""
    pos, index, state, v = record
    if state == STAGED:
        return pos, index, OK, Staged(codec.spec_in(values[v]))
    if state == PLACED:
        return pos, index, OK, Placed()
    if state == OK:
        return pos, index, OK, values[v]
    if state == FAILED:
        return pos, index, FAILED, str(v)
    raise ValueError(f"sample record in state {state!r}")


def stage_in(shared: Any, slot: int, pos: int, value: Any) -> Any:
    """In a collator: the sample as views on its staging space (or as it came)."""
    if not isinstance(value, Staged):
        return value
    start, stride = staging_region(shared.config, slot, pos)
    return codec.decode(value.spec, np.frombuffer(shared.shm.buf, np.uint8, stride, start))
