"""Which samples each live replica group trains on in a step, and the learning-rate rule
when the global batch shrinks. Pure functions, no torch.

A step's global batch is `groups_at_start * grad_accum` micro-batch slots; slot `j` of step
`s` holds samples `(s * slots + j) * micro_batch ...` (+ micro_batch). With a constant
global batch (ReCoVer), the live groups split all the slots between them in contiguous
blocks, so each committed step consumes the same sample ids, in the same global order, as a
failure-free run, whatever groups are missing; every group scales its loss by 1/slots and the
gradients are summed across groups. With a shrinking batch each live group trains its own
`grad_accum` slots, the missing groups' slots are skipped, and the learning rate follows
`lr_scale` (linear: live/total).

    plan_step(live_groups=[0, 2, 3], groups_at_start=4, grad_accum=2)
    -> {0: (0, 1), 2: (2, 3, 4), 3: (5, 6, 7)}
"""

from __future__ import annotations

from collections.abc import Sequence


def slots_per_step(groups_at_start: int, grad_accum: int) -> int:
    """Micro-batch slots in one global batch."""
    return groups_at_start * grad_accum


def plan_step(
    live_groups: Sequence[int], groups_at_start: int, grad_accum: int, constant: bool = True
) -> dict[int, tuple[int, ...]]:
    """Live group id -> the global slots it processes this step (in order). Constant: all
    `groups_at_start * grad_accum` slots in contiguous blocks over the live groups sorted by
    id (sizes differ by at most one); shrinking: each group its own `grad_accum` slots (a
    group id past the start count takes the slots of id modulo that count)."""
    live = sorted(set(live_groups))
    if not live:
        return {}
    if not constant:
        return {g: own_slots(g % groups_at_start, grad_accum) for g in live}
    total = slots_per_step(groups_at_start, grad_accum)
    return {
        g: tuple(range(r * total // len(live), (r + 1) * total // len(live)))
        for r, g in enumerate(live)
    }


def own_slots(group: int, grad_accum: int) -> tuple[int, ...]:
    """A group's slots in a failure-free run: `grad_accum` of them, from group*grad_accum."""
    return tuple(range(group * grad_accum, (group + 1) * grad_accum))


def slot_sample_ids(step: int, slot: int, slots: int, micro_batch: int) -> range:
    """The global sample ids of slot `slot` of step `step` (0-based)."""
    first = (step * slots + slot) * micro_batch
    return range(first, first + micro_batch)


def loss_divisor(live: int, groups_at_start: int, grad_accum: int, constant: bool) -> int:
    """Each micro-batch's mean loss is divided by this before backward, so that the SUM of
    the groups' gradients is the mean over the step's global batch."""
    slots = slots_per_step(groups_at_start, grad_accum)
    return slots if constant else min(live, groups_at_start) * grad_accum


def lr_scale(live: int, groups_at_start: int, rule: str, constant: bool) -> float:
    """Multiplier of the scheduled learning rate: 1 with a constant batch; with a shrinking
    batch `linear` gives live/total (the linear scaling rule, batch size and LR in
    proportion), `none` gives 1."""
    if constant or rule == "none" or live >= groups_at_start:
        return 1.0
    return live / groups_at_start
