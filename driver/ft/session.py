"""Checkpoints under torchft: one checkpointer per replica group, written by the lowest
live group (`set_writer` before each step's save).

    session = FtCheckpointSession(cfg, state, group=2, control=control, notices=notices,
                                  heard=watch.heard)
    start = session.resume()        # first start; then the Manager's step is set to `start`
    ft.restore = session.resume     # started again: read only if no live group is ahead

Each group checkpoints as a world of its own members (group rank of group size: FSDP shards
each member's; `replica_group` 0 only for group 0 of the first start, which cleans stale
writes; a replacement never cleans). Resuming is
CheckpointSession's: the first start follows `checkpoint.resume`; a started-again group
(its channel attempt > 0) hands `resume` to `FtReplica.restore`, which calls it only
when the group's first quorum has no live group ahead to heal from (a full restart).

The driver's SIGTERM or SIGINT stops every group after the same step: the run's notice rides
on a step's reduce (driver.ft.leave) and reaches the guard as its `agreed` poll; the writing
group writes the final checkpoint. The termination of this group's own pod (`heard`, or
`notices.pods()`) stops it too: it leaves the quorum (driver.ft.leave) and, if it is the
group that writes, writes a final checkpoint first when it fits the budget.
"""

from __future__ import annotations

from driver.aux.listeners import RayListeners
from driver.channel.stops import NoticePoll
from driver.checkpoint.checkpointer import Checkpointer
from driver.checkpoint.preemption import PreemptionGuard, first_of
from driver.checkpoint.session import CheckpointSession


class FtCheckpointSession(CheckpointSession):
    """CheckpointSession of one member (`group_rank` of `group_size`, world rank `rank`) of a
    torchft replica group: the group checkpoints as a world of its own members, each its
    shards."""

    def __init__(self, cfg, state, group: int, control=None, rank: int | None = None,
                 group_rank: int = 0, group_size: int = 1, notices=None,
                 heard=None):  # fmt: skip
        self.config, self.steps, self.state = cfg.checkpoint, cfg.train.steps, state
        who = group if rank is None else rank  # a member's starts: its group's, member by member
        self.attempt = control.call("start", who, timeout_s=60) if control is not None else 0
        first = self.attempt == 0
        self.ckpt = Checkpointer(
            self.config,
            cfg.run.team,
            cfg.run.name,
            group_rank,
            group_size,
            replica_group=0 if group == 0 and first else 1,
            callbacks=(RayListeners(),),
        )
        if notices is None and control is not None:
            notices = NoticePoll(control, ranks=[group if rank is None else rank])
        # the run's own notice is not polled here: it reaches every group after the same
        # step through the reduce (driver.ft.leave; build_trainer sets `guard.agreed`)
        poll = first_of(notices.pods if notices else None, heard)
        self.guard = PreemptionGuard(self.ckpt, poll=poll, give_up=self.failing)
        self.resumed = None
        self.start = 0
        self._reported = 0

    def should_stop(self, step: int) -> bool:
        """After each step: whether the guard stops this group here. Saves that keep
        failing do not stop the writing group alone: they ride on the reduce as the run's
        stop (driver.ft.leave.run_notice) and reach the guard, in every group after the
        same step, as its `agreed` poll; the writer then skips its final save (`give_up`)."""
        return self.guard.on_step_end(step, self.state)
