"""The collator loop: gather the samples of a step and name (or build) its batch.

Started by `driver.data.runtime` beside the feeder and producers of `driver.data.workers`.
When every sample of a step was placed into its rows by a producer (`driver.data.placement`)
the batch is already in its slot; otherwise the collator collates the samples as they came
(staged views, placed samples rebuilt as copies) and writes the batch into the slot. What
it reads and sends are typed records (driver.data.frames): a batch whose leaves outside the
arrays are not plain data (a custom collate_fn's objects) is reported as a collate error.
"""

from __future__ import annotations

from typing import Any

from driver.data import codec
from driver.data.placement import Placed, Placer, layout, rebuild
from driver.data.stages import collate_tree, default_collate
from driver.data.staging import inbound, stage_in
from driver.data.workers import OK, Shared, Stopped, get_item, prepare_worker, set_status


def collator_main(shared: Shared, row: int, wid: int, collate_fn: Any) -> None:
    """Gather the samples of a step, collate them and write the batch into its slot."""
    prepare_worker(shared, row)
    placer = Placer(shared)
    pending: dict[tuple[int, int], dict] = {}
    try:
        while True:
            (epoch, step, slot, count, records), values = get_item(shared, shared.sample_qs[wid])
            entry = pending.setdefault((epoch, step), {"samples": {}, "skipped": [], "n": 0})
            entry["n"] += len(records)
            for record in records:
                pos, index, state, value = inbound(record, values)
                if state == OK:
                    entry["samples"][pos] = (index, stage_in(shared, slot, pos, value))
                else:
                    entry["skipped"].append((index, value))
            if entry["n"] == count:
                del pending[(epoch, step)]
                set_status(shared, row, step, epoch)
                head, spec = _collate(shared, (epoch, step, slot, count), entry, collate_fn, placer)
                set_status(shared, row, -1, -1)
                try:
                    shared.ready_q.put(head, spec)
                except TypeError as err:  # leaves that are not plain data
                    why = f"the batch cannot go to the training process: {err}"
                    shared.ready_q.put(["collate_error", *head[1:5], why])
    except Stopped:
        return


def _collate(shared: Shared, where: tuple, entry: dict, collate_fn: Any, placer: Placer):
    """The ready record of a step: (head, [the batch's spec in transport form]); no spec
    when every sample was skipped; a "collate_error" head when collation failed."""
    epoch, step, slot, count = where
    ordered = sorted(entry["samples"].items())  # (pos, (index, sample))
    indices = [index for _, (index, _) in ordered]
    head = ["batch", epoch, step, slot, indices, entry["skipped"]]
    if not ordered:
        return head, []
    placed = sum(isinstance(sample, Placed) for _, (_, sample) in ordered)
    if placed:
        placer.agreed_for(None)  # recorded by the producer that placed first
    if placed == len(ordered) == count:  # every sample is in its rows already
        return head, [codec.spec_out(layout(placer.agreed, count)[0])]
    try:
        view = placer.slot_view(slot)
        samples = [
            rebuild(placer.agreed, view, count, pos) if isinstance(sample, Placed) else sample
            for pos, (_, sample) in ordered
        ]
        lazy = collate_fn is default_collate  # stack straight into the slot
        spec, arrays, nbytes = codec.encode(
            collate_tree(samples, lazy=True) if lazy else collate_fn(samples)
        )
    except Exception as err:
        return ["collate_error", epoch, step, slot, indices, f"{type(err).__name__}: {err}"], []
    size = shared.config.slot_bytes
    if nbytes > size:
        msg = f"batch needs {nbytes} bytes, more than PipelineConfig.slot_bytes={size}"
        return ["collate_error", epoch, step, slot, indices, msg], []
    codec.write(arrays, spec, shared.shm.buf[slot * size : slot * size + nbytes])
    return head, [codec.spec_out(spec)]
