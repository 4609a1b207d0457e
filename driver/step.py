"""One optimizer step of the training loop: `Loop(cfg, model, work, ...).step(step, batches)`
accumulates micro-batches (no DDP gradient sync until the last), clips, steps the optimizer
and the LR schedule under bf16 autocast on GPU, and returns the step's metrics row.

Phase times are CPU timers (no extra device sync): `data_wait_s` is the time in the batch
iterator and the host-to-device copy call; `forward_backward_s` the forward and backward
passes until each micro-batch's loss is read (`loss.item()` waits for the forward on GPU,
so backward kernels still queued spill into the next phase); `optimizer_s` the rest:
clipping, the optimizer and LR steps, until the gradient norm is read (a sync on GPU)."""

from __future__ import annotations

import contextlib
import time


def autocast_for(cfg, device):
    """A context factory: bf16 autocast (precision bf16, or auto on GPU), else nothing."""
    import torch

    bf16 = cfg.train.precision == "bf16" or (
        cfg.train.precision == "auto" and device.type == "cuda"
    )
    if bf16:
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


class Loop:
    """One optimizer step: accumulate micro-batches, clip, step, measure."""

    def __init__(self, cfg, model, work, optimizer, scheduler, device, world: int):

        self.cfg, self.model, self.work, self.device = cfg, model, work, device
        self.optimizer, self.scheduler, self.world = optimizer, scheduler, world
        self.autocast = autocast_for(cfg, device)
        per_step = cfg.train.micro_batch_size * cfg.train.grad_accum_steps * world
        self.units_per_step = per_step * work.units_per_example

    def step(self, step: int, batches) -> dict:
        import torch

        started = time.perf_counter()
        accum, total, wait = self.cfg.train.grad_accum_steps, 0.0, 0.0
        for micro in range(accum):
            fetch = time.perf_counter()
            batch = to_device(next(batches), self.device)
            wait += time.perf_counter() - fetch
            sync = micro == accum - 1 or not hasattr(self.model, "no_sync")
            with self.model.no_sync() if not sync else contextlib.nullcontext():
                with self.autocast():
                    loss = self.work.loss(self.model, batch) / accum
                loss.backward()
            total += loss.item()
        computed = time.perf_counter()
        clip = self.cfg.train.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else 1e9)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        ended = time.perf_counter()
        elapsed = ended - started
        return {
            "step": step + 1,
            "loss": total,
            "lr": lr,
            "grad_norm": grad_norm,
            "step_time": elapsed,
            "data_wait_s": wait,
            "forward_backward_s": computed - started - wait,
            "optimizer_s": ended - computed,
            f"{self.work.unit}_per_s": self.units_per_step / elapsed,
            "time": time.time(),
        }


def to_device(batch, device):
    """Move a tensor or a tuple of tensors to the device."""
    if isinstance(batch, tuple | list):
        return type(batch)(part.to(device, non_blocking=True) for part in batch)
    return batch.to(device, non_blocking=True)
