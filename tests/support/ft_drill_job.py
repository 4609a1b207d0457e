"""The job a fault-tolerance drill (tests.support.ft_drill) trains: a small regression
model, its optimizer and fixed data, identical on every replica group.

`Job(spec)` builds it from the drill's SPEC (seed, dim, hidden, lr, micro_batch,
step_sleep_s); `Job.micro_loss(step, slot, slots)` is the loss of one global micro-batch
slot, its samples fixed by (step, slot) (`slot_sample_ids`). `reference_losses(spec)` is
the failure-free run's loss per step in one process, `digest(model)` a hash of the weights
(equal digests are bit-identical weights), `finite(model)` whether they are all finite,
and `checkpointer(spec, ...)` driver.checkpoint's Checkpointer for the drill
(`ckpt_root`). Tests (tests/ft) use the job on its own too.
"""

from __future__ import annotations

import hashlib
import time


def digest(model) -> str:
    """Bytes of every parameter, hashed: equal digests are bit-identical weights."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def slot_sample_ids(step: int, slot: int, slots: int, micro_batch: int) -> range:
    """The sample ids of slot `slot` of step `step` (0-based): consecutive, in slot order
    (the drill's own addressing; the trainer's is driver.data.slots)."""
    first = (step * slots + slot) * micro_batch
    return range(first, first + micro_batch)


class Job:
    """The model, optimizer and data of the drill (identical on every group)."""

    def __init__(self, spec: dict):
        import torch

        torch.manual_seed(spec.get("seed", 0))
        torch.set_num_threads(1)
        dim, hidden = spec.get("dim", 32), spec.get("hidden", 64)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=spec.get("lr", 1e-2))
        gen = torch.Generator().manual_seed(1234)
        self.x = torch.randn(4096, dim, generator=gen)
        self.y = torch.sin(self.x @ torch.randn(dim, 1, generator=gen))
        self.micro, self.sleep = spec.get("micro_batch", 8), spec.get("step_sleep_s", 0.0)

    def micro_loss(self, step: int, slot: int, slots: int):
        """Mean loss of one global micro-batch slot (its samples are fixed by step, slot)."""
        ids = slot_sample_ids(step, slot, slots, self.micro)
        idx = [i % len(self.x) for i in ids]
        if self.sleep:
            time.sleep(self.sleep)
        return (self.model(self.x[idx]) - self.y[idx]).pow(2).mean()


def checkpointer(spec: dict, rank: int, world: int, replica_group: int = 0):
    """driver.checkpoint's Checkpointer for the drill, or None without `ckpt_root`."""
    if not spec.get("ckpt_root"):
        return None
    from driver.checkpoint import CheckpointConfig, Checkpointer

    cfg = CheckpointConfig(
        root=spec["ckpt_root"],
        interval_steps=spec.get("ckpt_interval", 0),
        async_mode="sync",
        keep_last=2,
    )
    run = spec.get("run", "drill")
    return Checkpointer(
        cfg, "drill", run, rank, world, replica_group=replica_group, secret=b"drill"
    )


def finite(model) -> bool:
    return all(bool(p.isfinite().all()) for p in model.parameters())


def reference_losses(spec: dict) -> list[float]:
    """The failure-free run's loss per step, in one process: every slot of every step,
    gradients summed locally (the same maths as the drill up to reduction order)."""
    job, groups, accum = Job(spec), spec["groups"], spec.get("grad_accum", 1)
    slots, losses = groups * accum, []
    for step in range(spec["steps"]):
        total = 0.0
        for slot in range(slots):
            loss = job.micro_loss(step, slot, slots) / slots
            loss.backward()
            total += loss.item()
        job.optimizer.step()
        job.optimizer.zero_grad(set_to_none=True)
        losses.append(total)
    return losses
