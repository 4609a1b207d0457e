"""The stepper under torchft (`ft.enabled`): one replica group's step, for the one trainer
(driver.trainer.loop), beside driver.trainer.plain's.

    stepper = FtStepper(core, ft, topo, rank, done=gate_store(gate))
    stepper.resume(session)       # first start: the checkpoint's step; started again: heal
    row = stepper.run()           # the committed step's row, or None (the vote failed)

Per step: `ft.begin_step()` (quorum; a group that is behind heals from a live peer first)
-> forward/backward of this group's micro-batch slots (its own, plus a share of a missing
group's: driver.ft.batch) -> `ft.reduce` (gradients and loss SUMmed across the live groups)
-> clipping -> `ft.commit` (all-or-nothing). A failed commit is not a step: no row, no
checkpoint, the same step runs again with the next quorum. The lowest rank of the lowest
live group (`driver.parallel.Topology.is_writer`) writes the checkpoints and the step's full
metrics row; a group that becomes the writer first sends copies of the rows the old writer
may have lost (driver.ft.records), and a writer that hands the rows back to a lower group
(a replacement is back) sends its unsent rows at once (`hand_back`), a step before the new
writer has its first: the rows of record reach the driver in step order. The end of the run
(the done mark, the writer's mark, the next group's copies) is driver.ft.end's.

A group started again (attempt > 0) reads no checkpoint up front: it heals from a live group
at its first quorum, and reads the newest checkpoint only when no group is ahead (a full
restart; `FtReplica.restore`). Below `ft.min_replicas` FtStopped ends the worker with the
one-line reason; Ray Train's controller then stops the run at once (driver.ft.stop).
"""

from __future__ import annotations

import time

from driver.ft.end import finished, hand_over_at_end
from driver.ft.records import Copies, mark_recorded
from driver.trainer.core import StepCore, Times
from driver.trainer.loop import RunFinished


class FtStepper:
    """One step of one replica group: its slots' forward/backward, reduce, clip, commit."""

    def __init__(self, core: StepCore, ft, topo, rank: int, done=None, watchdog=None):
        self.core, self.ft, self.topo, self.rank, self.done = core, ft, topo, rank, done
        self.watchdog = watchdog  # driver.ft.watchdog.Watchdog, or None
        cfg = core.cfg
        self.units = cfg.train.micro_batch_size * topo.world * cfg.train.grad_accum_steps
        self.copies = Copies()
        self.took_over = False
        self.committed = 0  # steps this process committed
        self.wrote = False  # whether this rank wrote the newest committed step's row
        self.hand_back = lambda: None
        """Sends this rank's unsent rows now (driver.trainer.build: the reporter's `send_now`)."""

    @property
    def step(self) -> int:
        """Steps committed so far (after healing: the live groups' count)."""
        return self.ft.step

    def resume(self, session) -> int:
        """The first start follows `checkpoint.resume`; a group started again heals from a
        live group, and reads the newest checkpoint only if none is ahead."""
        if session is None:
            return 0
        if session.attempt == 0:
            start = session.resume()
            if start:
                batches = start * self.topo.groups
                self.ft.manager.load_state_dict({"step": start, "batches_committed": batches})
            return start
        self.ft.restore = session.resume
        return 0

    def run(self) -> dict | None:
        """The committed step's row, or None when the commit vote failed. RunFinished when
        the other groups finished the run while this one waited. Watched: a step that hangs
        past `ft.watchdog_s` ends this member (driver.ft.watchdog)."""
        if self.watchdog is None:
            return self._run()
        with self.watchdog.step(self.step):
            return self._run()

    def _run(self) -> dict | None:
        from driver.ft.replica import FtGroupLost, FtStopped

        if not self.committed and finished(self.done):  # a replacement arriving after the end
            raise RunFinished
        try:
            plan = self.ft.begin_step()
        except (FtStopped, FtGroupLost):
            if finished(self.done):  # one of fewer than ft.min_replicas, or a group that lost
                raise RunFinished from None  # its rank 0, after the end
            raise
        if finished(self.done):  # a quorum without the groups that finished the run
            raise RunFinished
        self.after_quorum(plan.position)
        core, ft = self.core, self.ft
        times = Times(started=time.perf_counter())
        core.inject(plan.step, "before")
        local = core.backward(plan.step, plan.slots, plan.divisor, times, inject=False)
        midway = lambda: core.inject(plan.step, "during")  # noqa: E731 (inside the reduce)
        total = ft.reduce(core.model.parameters(), self.in_group(local), midway=midway)
        norm = core.clip()
        lr = core.scheduler.get_last_lr()[0] * plan.lr_scale
        if not ft.commit(core.optimizer, core.scheduler):
            return None
        times.ended = time.perf_counter()
        self.committed += 1
        live = 1.0 if core.cfg.ft.constant_batch else plan.live / ft.start_groups
        row = core.row(plan.step, total, lr, norm, times, self.units * live)
        return {**row, "ft_slots": len(plan.slots), **ft.metrics()}

    def in_group(self, local: float) -> float:
        """This member's share of the step's loss as the groups sum it: inside a group of
        several workers, its members' sum over their number (DDP or FSDP averaged their
        gradients the same way)."""
        size = self.topo.group_size
        if size == 1:
            return local
        import torch

        total = torch.tensor([local], dtype=torch.float32)
        if torch.cuda.is_available():
            total = total.cuda()
        torch.distributed.all_reduce(total)  # the group's process group (Ray Train's)
        return float(total) / size

    def writer(self) -> bool:
        """Whether this rank writes the step's records: the lowest rank of the lowest live
        group."""
        return self.topo.is_writer(self.rank, self.ft.plan.position)

    def in_writer_copy(self) -> bool:
        """Whether this rank's replica group is the writer's (the lowest live group)."""
        return self.ft.plan is not None and self.ft.plan.position == 0

    def after_quorum(self, position: int) -> None:
        """A rank that wrote the last step but not this one (a lower group is back) sends
        its unsent rows now, before this step's collectives: the new writer's first row
        comes after this step, so the old writer's last rows are at the driver first."""
        if self.wrote and not self.topo.is_writer(self.rank, position):
            self.wrote = False
            self.hand_back()

    def rows(self, row: dict, writer: bool) -> list[tuple[dict, bool]]:
        """The copies of the old writer's rows this group sends on becoming the writer,
        then the step's own row."""
        self.wrote = writer
        return [(copy, True) for copy in self.copies.after_step(row, writer)] + [(row, writer)]

    def checkpoint_writer(self) -> bool:
        """Whether this member writes its shard of the step's checkpoint: every member of
        the writer's group (the lowest live one)."""
        return self.in_writer_copy()

    def end(self, reporter, logger, completed: bool, stopped: bool = False) -> bool:
        """After the last step (`completed`): the done mark; the next group in line sends
        its copies when the writer's mark does not come. Whether this rank sends the run's
        final figures: after the last step, or when the run's stop notice stopped every
        group after the same step (driver.ft.leave), the writer; never a group that left."""
        if stopped and self.ft.run_stop_at is not None:
            return self.ft.plan is not None and self.writer()
        if not completed:
            return False
        wrote = self.ft.plan is not None and self.writer()
        reports = hand_over_at_end(self.ft, self.done, wrote, self.copies, reporter, logger)
        self.took_over = reports and not wrote
        return reports

    def reported(self) -> None:
        """The final figures reached the driver: mark the writer's rows delivered."""
        mark_recorded(self.done, self.core.cfg.train.steps)

    def metrics(self) -> dict:
        return self.ft.metrics()

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.close()
        self.ft.close()


def gate_store(gate: str | None):
    """A client of the start gate's TCPStore (the run's done mark), or None."""
    if not gate:
        return None
    from datetime import timedelta

    from torch.distributed import TCPStore

    host, port = gate.rsplit(":", 1)
    return TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=60))
