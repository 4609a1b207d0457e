"""The feeder: this rank's steps as producer tasks, queued from the training process.

The training process feeds its own pipeline, as `torch.utils.data.DataLoader`'s sampler
runs in the main process: each time a batch slot is free (at the start, and when a batch
is no longer referenced) it queues the tasks of the next step for that slot. No process of
its own, so no queue hop and no wake-up per batch, and every worker process of the
pipeline fetches samples. The schedule of each epoch is computed 64 steps at once; the
feeder goes on into the next epoch by itself (prefetching across the epoch boundary).

    feeder = Feeder(cfg, rank, world_size, len(dataset), epoch, origin)
    step = feeder.next_step()       # (epoch, step, indices) or None (an empty epoch)
    for task in feeder.tasks(step, slot): work_q.put(task)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from driver.data.frames import PIPE_BUF
from driver.data.sampling import rank_slice, schedule_entries, steps_in_epoch

_HEAD_BYTES = 128  # a task's record beside its indices: framing, epoch, step, slot, ...


class Feeder:
    """This rank's steps in schedule order, across epochs, and their tasks."""

    def __init__(self, cfg: Any, rank: int, world_size: int, size: int, epoch: int, origin: int):
        self.cfg, self.rank, self.world_size, self.size = cfg, rank, world_size, size
        self._steps = self._all_steps(epoch, origin)
        fits = (PIPE_BUF - _HEAD_BYTES) // (len(str(max(size - 1, 0))) + 1)
        self.task_size = max(1, min(cfg.task_size, fits))  # a task is one write of the pipe

    def next_step(self) -> tuple[int, int, list[int]] | None:
        """(epoch, step, sample indices) of the next step; None once an epoch is empty
        (nothing will ever come)."""
        return next(self._steps, None)

    def tasks(self, step: tuple[int, int, list[int]], slot: int) -> list[list]:
        """The step's producer tasks `[epoch, step, slot, count, first, indices]` of up to
        `task_size` samples each (fewer where the indices would not fit in one write of the
        pipe: about 280 for a dataset of 10¹² samples; an empty step: one empty task)."""
        epoch, number, indices = step
        size = self.task_size
        return [
            [epoch, number, slot, len(indices), first, indices[first : first + size]]
            for first in range(0, max(len(indices), 1), size)
        ]

    def _all_steps(self, epoch: int, origin: int) -> Iterator[tuple[int, int, list[int]]]:
        cfg = self.cfg
        while True:
            steps = steps_in_epoch(
                self.size, cfg.batch_size, self.world_size, origin, cfg.drop_last
            )
            if steps == 0 and origin == 0:
                return  # an empty epoch: every later one is empty too
            for step, indices in self._epoch_steps(epoch, origin, steps):
                yield epoch, step, indices
            epoch, origin = epoch + 1, 0

    def _epoch_steps(self, epoch: int, origin: int, steps: int, block: int = 64):
        """(step, sample indices) of this rank's steps, the schedule computed `block` at
        once."""
        cfg = self.cfg
        args = (self.size, cfg.batch_size, self.world_size, origin, cfg.drop_last)
        for base in range(0, steps, block):
            spans = [
                rank_slice(step, self.rank, *args) for step in range(base, min(base + block, steps))
            ]
            positions = np.concatenate([np.arange(a, b) for a, b in spans])
            entries = schedule_entries(cfg.seed, epoch, self.size, positions, cfg.shuffle)
            entries, at = entries.tolist(), 0
            for step, (a, b) in enumerate(spans, base):
                yield step, entries[at : at + b - a]
                at += b - a
