"""Which samples each live replica group trains on in a step, and the learning-rate rule
when the global batch shrinks. Pure functions, no torch.

A step's global batch is `groups_at_start * grad_accum` micro-batch slots (the samples of
each: driver.data.slots). With a constant global batch (ReCoVer), each live group trains
its own slots and the missing groups' slots are shared out among the live ones, so each
committed step consumes the same samples as a failure-free run, whatever groups are
missing; every group scales its loss by 1/slots and the gradients are summed across
groups. With a shrinking batch each live group trains its own
`grad_accum` slots, the missing groups' slots are skipped, and the learning rate follows
`lr_scale` (linear: live/total).

    plan_step(live_groups=[0, 2, 3], groups_at_start=4, grad_accum=2)
    -> {0: (0, 1, 2), 2: (4, 5, 3), 3: (6, 7)}
"""

from __future__ import annotations

from collections.abc import Sequence


def slots_per_step(groups_at_start: int, grad_accum: int) -> int:
    """Micro-batch slots in one global batch."""
    return groups_at_start * grad_accum


def plan_step(
    live_groups: Sequence[int], groups_at_start: int, grad_accum: int, constant: bool = True
) -> dict[int, tuple[int, ...]]:
    """Live group id -> the global slots it processes this step (in order). Each live group
    keeps its own `grad_accum` slots (the ones its data pipeline prefetched); constant: the
    slots of the missing groups go round robin to the live groups sorted by id, after their
    own (sizes differ by at most one); shrinking: the missing groups' slots are skipped. A
    group id past the start count takes the slots of id modulo that count."""
    live = sorted(set(live_groups))
    plan: dict[int, list[int]] = {}
    owners: set[int] = set()
    for g in live:  # each live group its own slots (an id past the start count: id modulo)
        base = g % groups_at_start
        plan[g] = [] if base in owners else list(own_slots(base, grad_accum))
        owners.add(base)
    if constant and live:
        orphans = [
            slot
            for g in range(groups_at_start)
            if g not in owners
            for slot in own_slots(g, grad_accum)
        ]
        for i, slot in enumerate(orphans):
            plan[live[i % len(live)]].append(slot)
    return {g: tuple(slots) for g, slots in plan.items()}


def own_slots(group: int, grad_accum: int) -> tuple[int, ...]:
    """A group's slots in a failure-free run: `grad_accum` of them, from group*grad_accum."""
    return tuple(range(group * grad_accum, (group + 1) * grad_accum))


def slot_sample_ids(step: int, slot: int, slots: int, micro_batch: int) -> range:
    """The global sample ids of slot `slot` of step `step` (0-based)."""
    first = (step * slots + slot) * micro_batch
    return range(first, first + micro_batch)


def loss_divisor(live: int, groups_at_start: int, grad_accum: int, constant: bool) -> int:
    """Each micro-batch's mean loss is divided by this before backward, so that the SUM of
    the groups' gradients is the mean over the step's global batch (inside a group of
    several workers, DDP or FSDP averages over its members first: the same divisor)."""
    slots = slots_per_step(groups_at_start, grad_accum)
    return slots if constant else min(live, groups_at_start) * grad_accum


def lr_scale(live: int, groups_at_start: int, rule: str, constant: bool) -> float:
    """Multiplier of the scheduled learning rate: 1 with a constant batch; with a shrinking
    batch `linear` gives live/total (the linear scaling rule, batch size and LR in
    proportion), `none` gives 1."""
    if constant or rule == "none" or live >= groups_at_start:
        return 1.0
    return live / groups_at_start
