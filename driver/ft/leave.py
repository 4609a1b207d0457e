"""Under torchft, a replica group whose pod is being terminated leaves the quorum at once.

    hook = LeaveHook(heard=watch.heard, pods=notices.pods, group=2, group_size=2)

After each committed step the hook asks whether this group's pod is being terminated: its
own SIGTERM (driver.trainer.signals) or a notice in the run's channel for one of its
ranks (another member's SIGTERM, relayed by that member; polled without blocking).
Then, between steps, the group leaves (`FtReplica.leave`: its Manager stops heartbeating,
and the next quorum forms without it as soon as its last heartbeat is
`ft.heartbeat_timeout_ms` old: torchft's Lighthouse has no call to leave) and trains no
more; the others go on without it, and Ray Train replaces the group once its pod is gone.
The step in flight when the signal came is finished first: its share of the gradient
allreduce reaches the others, so their commit holds and nothing is run twice.

A replica group of several workers leaves as one: a pod's SIGTERM reaches one member (or
the members of one node), so after every step the members agree (a MAX all-reduce of the
flag over the group's CPU process group, driver.checkpoint.groups) and all leave after the
same step; each member's Manager stops (`FtReplica.leave`).

The checkpoint hook after this one (driver.trainer.hooks.CheckpointHook) sees the same
notice through its PreemptionGuard: a group that writes checkpoints (the lowest live one)
writes a final one before it ends, if it fits `checkpoint.preemption_budget_s`, so a whole
job preempted at once (every pod, the driver too) still saves; the others write nothing.

The run's own stop (the driver's SIGTERM or SIGINT) is not a group leaving: every group
stops, after the same step. Groups poll the driver's notice at their own pace, so it rides
on the step's reduce instead (FtReplica.run_notice: every live group's same member learns it
from the same step's sums, `run_stop_at`); the hook agrees on it inside the group with the
pod flag (one all-reduce of both) and hands it to the PreemptionGuard (`run_stopped`, its
`agreed` poll), which acts on it at that step: the lowest live group writes the final
checkpoint and reports the run's final figures, the others stop without writing. Saves
that keep failing (`checkpoint.max_failed_saves`) stop the run the same way: only the
writing group saves, so its members send "now" as the run's stop (`run_notice`), and every
group stops after the same step rather than the writer alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from driver.trainer.hooks import Hook

log = logging.getLogger("driver.ft")


class LeaveHook(Hook):
    """Leaves the quorum after the first committed step once this group's pod is ending."""

    def __init__(self, heard: Callable[[], float | None],
                 pods: Callable[[], float | None] | None = None, group: int = 0,
                 group_size: int = 1):  # fmt: skip
        self.heard, self.pods, self.group = heard, pods, group
        self.group_size = group_size
        self.left_at: float | None = None
        """Wall-clock time the group left (None: it did not)."""
        self.run_stop: float | None = None
        """The run's stop notice as the group agreed on it after the newest step."""

    def ending(self) -> float | None:
        """When this group's pod's termination was heard, or None."""
        times = [t for t in (self.heard(), self.pods() if self.pods else None) if t is not None]
        return min(times, default=None)

    def agreed(self, run_stop: float | None = None) -> tuple[float | None, float | None]:
        """The group's answers, the same on every member after the same step: when any
        member heard its pod ending (the earliest), and the run's stop notice as the step's
        reduce carried it to any member (`run_stop`: FtReplica.run_stop_at); None each."""
        at = self.ending()
        if self.group_size <= 1:
            return at, run_stop
        import torch
        import torch.distributed as dist

        from driver.checkpoint.groups import training_cpu_group

        flags = torch.tensor([-t if t is not None else float("-inf") for t in (at, run_stop)],
                             dtype=torch.float64)  # fmt: skip
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=training_cpu_group())
        return tuple(None if f == float("-inf") else -f for f in flags.tolist())

    def should_stop(self, trainer, step: int) -> bool:
        ft = trainer.stepper.ft
        at, self.run_stop = self.agreed(getattr(ft, "run_stop_at", None))
        if at is None:
            return False  # the run's stop: every group's guard acts on it (`run_stopped`)
        ft.leave()
        self.left_at = time.time()
        trainer.finished_elsewhere = True  # the run goes on without it: no final figures
        log.warning("ft: replica group %d leaves the quorum after step %d: its pod is "
                    "being terminated (heard %.2f s ago)", self.group, step,
                    self.left_at - at)  # fmt: skip
        return True

    def run_stopped(self) -> float | None:
        """The run's stop notice once every live group has it after the same step (a
        PreemptionGuard's `agreed` poll), else None."""
        return self.run_stop


def run_notice(notices=None, session=None) -> Callable[[], float | None]:
    """What a member sends on the step's reduce as the run's stop (FtReplica.run_notice):
    the driver's notice (`notices.run`), else now when its group's checkpoint saves keep
    failing (`session.failing()`), else None."""

    def heard() -> float | None:
        at = notices.run() if notices is not None else None
        if at is None and session is not None and session.failing():
            return time.time()
        return at

    return heard
