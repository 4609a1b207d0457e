"""One training step of one replica group under torchft, for driver.ft.loop: `FtStep.step`
runs the quorum and slot plan (`ft.begin_step`), forward/backward of this group's planned
micro-batch slots (batches from driver.ft.source.SlotSource by step and slot), `ft.reduce`,
clipping and `ft.commit`, and returns the committed step's metrics row, or None when the
commit vote failed (the same step runs again).

    stepper = FtStep(cfg, model, work, optimizer, scheduler, device, source)
    stepper.done = gate_store(gate)     # the run's done mark (driver.ft.loop), or None
    row = stepper.step(ft)              # ft: a driver.ft.replica.FtReplica
"""

from __future__ import annotations

import time

from driver.ft.end import RunFinished, finished
from driver.step import autocast_for


class FtStep:
    """One step of one replica group: its slots' forward/backward, reduce, clip, commit."""

    def __init__(self, cfg, model, work, optimizer, scheduler, device, source):
        self.cfg, self.model, self.work, self.device = cfg, model, work, device
        self.optimizer, self.scheduler, self.source = optimizer, scheduler, source
        self.autocast = autocast_for(cfg, device)
        self.done = None  # the gate's store: the run's done mark, checked after each quorum
        per_step = cfg.train.micro_batch_size * source.slots
        self.units_per_step = per_step * work.units_per_example

    def step(self, ft) -> dict | None:
        """The committed step's row, or None when the commit vote failed."""
        import torch

        from driver.step import to_device

        plan = ft.begin_step()
        if finished(self.done):  # a quorum without the groups that finished the run
            raise RunFinished
        started = time.perf_counter()
        local, wait = 0.0, 0.0
        for slot in plan.slots:
            fetch = time.perf_counter()
            batch = to_device(self.source.batch(plan.step, slot), self.device)
            wait += time.perf_counter() - fetch
            with self.autocast():
                loss = self.work.loss(self.model, batch) / plan.divisor
            loss.backward()
            local += loss.item()
        computed = time.perf_counter()
        total = ft.reduce(self.model.parameters(), local)
        clip = self.cfg.train.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else 1e9)
        lr = self.scheduler.get_last_lr()[0] * plan.lr_scale
        if not ft.commit(self.optimizer, self.scheduler):
            return None
        ended = time.perf_counter()
        elapsed = ended - started
        return {
            "step": plan.step + 1,
            "loss": total,
            "lr": lr,
            "grad_norm": float(norm),
            "step_time": elapsed,
            "data_wait_s": wait,
            "forward_backward_s": computed - started - wait,
            "optimizer_s": ended - computed,
            f"{self.work.unit}_per_s": self.units_per_step * plan.live / ft.start_groups / elapsed
            if not self.cfg.ft.constant_batch
            else self.units_per_step / elapsed,
            "time": time.time(),
            "ft_slots": len(plan.slots),
            **ft.metrics(),
        }
