"""The stepper without torchft: DDP, or FSDP2/HSDP over the run's mesh (driver.parallel).

    stepper = PlainStepper(core, rank, grad_accum)
    stepper.resume(session)          # the checkpoint's step (0: fresh)
    row = stepper.run()              # one optimizer step; never None

Each step the worker trains its own `grad_accum` slots (driver.data.slots.own_slots);
DDP and FSDP average the gradients over every worker, so each micro-batch's loss is divided
by `grad_accum`. Rank 0 writes the run's records (the full metrics row); every rank writes
its own shard of each checkpoint.
"""

from __future__ import annotations

import time

from driver.data.slots import own_slots
from driver.trainer.core import StepCore, Times


class PlainStepper:
    """One optimizer step of one worker of a DDP/FSDP world."""

    def __init__(self, core: StepCore, rank: int, grad_accum: int, slots: int, shard: int = 1):
        self.core, self.rank, self.accum, self.shard = core, rank, grad_accum, shard
        self.slots = own_slots(rank, grad_accum)
        self.step = 0
        self.units = core.cfg.train.micro_batch_size * slots
        """Examples one step trains on, across all workers."""

    def resume(self, session) -> int:
        """Read the checkpoint the run resumes from (when checkpoints are on); the step."""
        self.step = session.resume() if session is not None else 0
        return self.step

    def run(self) -> dict:
        core = self.core
        times = Times(started=time.perf_counter())
        core.inject(self.step, "before")
        loss = core.backward(self.step, self.slots, self.accum, times)
        norm = core.clip()
        lr = core.scheduler.get_last_lr()[0]
        core.optimizer.step()
        core.optimizer.zero_grad(set_to_none=True)
        core.scheduler.step()
        times.ended = time.perf_counter()
        row = core.row(self.step, loss, lr, norm, times, self.units)
        self.step += 1
        return row

    def writer(self) -> bool:
        """Whether this rank writes the step's records: rank 0."""
        return self.rank == 0

    def in_writer_copy(self) -> bool:
        """Whether this rank holds a part of the writer's model copy (its FSDP group)."""
        return self.rank // self.shard == 0

    def rows(self, row: dict, writer: bool) -> list[tuple[dict, bool]]:
        """The rows to report for a committed step: its own."""
        return [(row, writer)]

    def checkpoint_writer(self) -> bool | None:
        """None: every rank writes its shard of every checkpoint."""
        return None

    def end(self, reporter, logger, completed: bool, stopped: bool = False) -> bool:
        """After the loop (the last step, or an early stop): whether this rank sends the
        run's final figures (rank 0)."""
        return self.rank == 0

    def reported(self) -> None:
        pass

    def metrics(self) -> dict:
        return {}

    def close(self) -> None:
        pass
