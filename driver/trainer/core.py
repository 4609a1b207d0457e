"""What every stepper shares (driver.trainer.plain, driver.ft.stepper): one micro-batch
slot's forward and backward, clipping, and the step's metrics row.

    core = StepCore(cfg, model, work, optimizer, scheduler, device, feed, condition)
    loss, wait = core.backward(step, slots, divisor, sync_last=True)
    norm = core.clip()
    row = core.row(step, loss, lr, norm, times, units)

Each micro-batch comes from the feed by (step, slot) (driver.data.feed) and, with an
`aux.condition` service, gets its embeddings (`condition(batch) -> (batch, emb)`). The
random numbers a loss draws (the DiT's noise) are seeded by (seed, step, slot) before each
micro-batch, so a slot trains alike wherever it runs: on its own worker, on a torchft group
that took it over, or after a resume. bf16 autocast on GPU (`train.precision`).

Phase times are CPU timers (no extra device sync): `data_wait_s` is the time in the feed,
conditioning and the host-to-device copy call; `forward_backward_s` the forward and
backward passes until each micro-batch's loss is read (`loss.item()` waits for the forward
on GPU, so backward kernels still queued spill into the next phase); `optimizer_s` the rest.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from driver.data.sampling import sample_seed


def autocast_for(cfg, device):
    """A context factory: bf16 autocast (precision bf16, or auto on GPU), else nothing."""
    import torch

    bf16 = cfg.train.precision == "bf16" or (
        cfg.train.precision == "auto" and device.type == "cuda"
    )
    if bf16:
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def to_device(batch, device):
    """Move a tensor, or a tuple/list/dict of tensors, to the device."""
    if isinstance(batch, dict):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, tuple | list):
        return type(batch)(to_device(part, device) for part in batch)
    return batch.to(device, non_blocking=True)


@dataclass
class Times:
    """Phase boundaries of one step (perf_counter seconds)."""

    started: float = 0.0
    computed: float = 0.0
    ended: float = 0.0
    wait: float = 0.0


class StepCore:
    """Forward/backward of micro-batch slots, clipping, and the row of a step."""

    def __init__(self, cfg, model, work, optimizer, scheduler, device, feed, condition=None,
                 offset: int = 0, faults=None):  # fmt: skip
        self.cfg, self.model, self.work, self.device = cfg, model, work, device
        self.faults = faults
        """driver.trainer.faults.Faults (None: no injection)."""
        self.optimizer, self.scheduler, self.feed = optimizer, scheduler, feed
        self.condition = condition
        self.offset = offset
        """Added to the run's slot numbers to address the feed: a DiLoCo learner's share of
        the experiment's slots starts there (0 otherwise)."""
        self.autocast = autocast_for(cfg, device)
        self.seed = cfg.train.seed

    def backward(self, step: int, slots, divisor: float, times: Times, sync_last=True,
                 inject=True) -> float:  # fmt: skip
        """Forward and backward of each slot's micro-batch (loss / `divisor`); gradients
        accumulate, synchronised only on the last micro-batch when the model can defer
        (DDP's `no_sync`) and `sync_last`. The sum of the divided losses."""
        import torch

        total, slots = 0.0, list(slots)
        for i, slot in enumerate(slots):
            fetch = time.perf_counter()
            slot += self.offset
            batch = self.feed.batch(step, slot)
            if self.condition is not None:
                batch = self.condition(batch)
            batch = to_device(batch, self.device)
            times.wait += time.perf_counter() - fetch
            torch.manual_seed(sample_seed(self.seed, step, slot))
            defer = sync_last and i < len(slots) - 1 and hasattr(self.model, "no_sync")
            if inject and i == len(slots) - 1:
                self.inject(step, "during")  # before the backward that syncs the gradients
            with self.model.no_sync() if defer else contextlib.nullcontext():
                with self.autocast():
                    loss = self.work.loss(self.model, batch) / divisor
                loss.backward()
            total += loss.item()
        times.computed = time.perf_counter()
        return total

    def inject(self, step: int, phase: str) -> None:
        """A fault point of the step (driver.trainer.faults), if the run drills one."""
        if self.faults is not None:
            self.faults.at(step, phase)

    def clip(self) -> float:
        """Clip the gradient norm (`train.max_grad_norm`; 0: measure only); the norm."""
        import torch

        clip = self.cfg.train.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else 1e9)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def row(self, step: int, loss: float, lr: float, norm: float, times: Times, units: float):
        """The metrics row of committed step `step` (0-based; the row says `step + 1`)."""
        elapsed = times.ended - times.started
        digest = {}
        if self.cfg.debug.digest:
            from driver.trainer.faults import param_digest

            digest["param_digest"] = param_digest(self.model)
        return {
            **digest,
            "step": step + 1,
            "loss": loss,
            "lr": lr,
            "grad_norm": norm,
            "step_time": elapsed,
            "data_wait_s": times.wait,
            "forward_backward_s": times.computed - times.started - times.wait,
            "optimizer_s": times.ended - times.computed,
            f"{self.work.unit}_per_s": units * self.work.units_per_example / elapsed,
            "time": time.time(),
        }
