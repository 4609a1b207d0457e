"""The plan of one step of one replica group under torchft, for driver.ft.replica: the
live groups, this group's place among them, its micro-batch slots, the loss divisor and
the LR multiplier (the rules are driver.ft.batch's); or, when no quorum forms, what it
means (`quorum_failure`) and the one-line reason FtStopped carries. Pure, no torch.

    plan = step_plan(cfg.ft, step=7, live_groups=(0, 2, 3), position=1, group=2,
                     groups_at_start=4, grad_accum=2)
    plan.slots, plan.divisor, plan.lr_scale
    quorum_failure(group_rank=1, waited_s=0.01, quorum_timeout_s=60)   # "group lost"
    no_quorum_reason(cfg.ft, step=7, last_live=2, groups_at_start=3, err=err)
"""

from __future__ import annotations

from dataclasses import dataclass

from driver.config.ft import FtConfig
from driver.ft.batch import loss_divisor, lr_scale, plan_step


@dataclass(frozen=True)
class StepPlan:
    step: int
    """The step about to run (0-based; the number of steps committed so far)."""
    live: int
    """Replica groups in this step's quorum."""
    position: int
    """This group's place among them (0: the lowest live group)."""
    slots: tuple[int, ...]
    """The global micro-batch slots this group processes (driver.ft.batch)."""
    divisor: int
    """Divide each micro-batch's mean loss by this before backward."""
    lr_scale: float
    """Multiplier on the scheduled learning rate for this step."""


def step_plan(
    cfg: FtConfig,
    step: int,
    live_groups: tuple[int, ...],
    position: int,
    group: int,
    groups_at_start: int,
    grad_accum: int,
    group_size: int = 1,
    member: int = 0,
) -> StepPlan:
    """The plan of `step` for member `member` of `group` (of `group_size` workers), the
    `position`-th of the live groups (their ids: `live_groups`) in the quorum. Slots are the
    run's (driver.data.slots): worker `group * group_size + member` owns `grad_accum`; a
    member takes over the slots of the same member of a missing group."""
    constant = cfg.constant_batch
    live = len(live_groups)
    slots = plan_step(live_groups, groups_at_start, grad_accum, constant)
    return StepPlan(
        step,
        live,
        position,
        member_slots(slots[group], grad_accum, group_size, member),
        loss_divisor(live, groups_at_start, grad_accum, constant),
        lr_scale(live, groups_at_start, cfg.lr_scaling, constant),
    )


def member_slots(group_slots, grad_accum: int, group_size: int, member: int) -> tuple[int, ...]:
    """A group's slots (in the groups' numbering: group g owns g*grad_accum...) as one
    member's slots of the run: `grad_accum` slots from worker (g * group_size + member)."""
    out = []
    for slot in group_slots:
        owner, index = divmod(slot, grad_accum)
        out.append((owner * group_size + member) * grad_accum + index)
    return tuple(out)


def quorum_failure(group_rank: int, waited_s: float, quorum_timeout_s: float) -> str:
    """What a member's failed quorum call means. A member other than its group's rank 0 asks
    the group's quorum server in rank 0's process (torchft's ManagerServer); if that call
    fails long before the quorum timeout, rank 0 is gone (a connect error, or the connection
    broke while the request waited there; both come within milliseconds), so this group is
    broken and is replaced like any group that lost a member: "group lost". Otherwise no
    quorum formed within the timeout (too few groups left, or the Lighthouse is gone):
    "stopped", the run ends (FtStopped)."""
    quick = waited_s < quorum_timeout_s / 2
    return "group lost" if group_rank > 0 and quick else "stopped"


def no_quorum_reason(
    cfg: FtConfig, step: int, last_live: int | None, groups_at_start: int, err: BaseException
) -> str:
    """The one line of FtStopped: no quorum formed at `step` (the last had `last_live`)."""
    first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    return (
        f"ft: no quorum of ft.min_replicas={cfg.min_replicas} replica groups "
        f"within ft.quorum_timeout_s={cfg.quorum_timeout_s:g} at step {step} "
        f"(last quorum: {last_live} of {groups_at_start} groups; {first})"
    )
