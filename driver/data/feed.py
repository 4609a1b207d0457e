"""A training worker's batches by (step, slot): the one data source of every layout.

    feed = Feed(dataset, micro_batch=16, slots=world * accum, seed=0, rank=rank,
                grad_accum=accum, pipeline=PipelineConfig(producers=2, ...) or None)
    batch = feed.batch(step, slot)   # any slot of any step (from the newest state loaded)
    feed.state_dict()                # the data position of the newest step asked for
    feed.load_state_dict(state)      # a checkpoint's (or a live torchft group's) position
    feed.close()

Slots and their samples are `driver.data.slots`'. Without `pipeline` every batch is made
in this process (fetch, stages, collate). With it, the worker's own slots (`slots.own_slots`)
come from its shared-memory pipeline (feeder → producers → collators, one batch of
`micro_batch × grad_accum` per step, split into its slots), prefetched ahead; any other slot
(a torchft replica group taking over a lost group's slots), and an own slot of a step the
pipeline has passed (a step run again after a failed commit keeps its batch), is made in
this process with the same stages, so it holds the same samples. A jump (healing from a
live group, a resume) moves the pipeline to the new step.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from driver.data.sampling import sample_seed, schedule_entries
from driver.data.slots import Schedule, own_slots
from driver.data.stages import SampleContext, WorkerInfo, as_stages, default_collate


class Feed:
    """Batches of one worker by (step, slot), in process or from its pipeline."""

    def __init__(self, dataset, micro_batch: int, slots: int, seed: int, rank: int = 0,
                 grad_accum: int = 1, pipeline=None, stages=None):  # fmt: skip
        self.dataset, self.seed, self.rank, self.accum = dataset, seed, rank, grad_accum
        self.schedule = Schedule(len(dataset), micro_batch, slots)
        self.own = own_slots(rank, grad_accum)
        self.stages = as_stages(stages)
        self._clients: list | None = None
        self.pipeline_config = pipeline
        self._pipeline = None
        self._held: tuple[int, list] | None = None  # (step, its own slots' batches)
        self.current = 0

    # -- position ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        """The data position of the newest step asked for: {"step", "epoch", "position"}
        (a checkpoint's, or the state a torchft group heals with)."""
        return {"step": self.current, **self.schedule.state(self.current)}

    def load_state_dict(self, state: dict) -> None:
        """Continue the schedule of `state` from its step on (any global batch: a resume
        with another shape continues at the same position). A state without a step (an
        older batch source's) changes nothing."""
        if isinstance(state, dict) and {"step", "epoch", "position"} <= set(state):
            step = int(state["step"])
            self.schedule = self.schedule.rebase(step, int(state["epoch"]), int(state["position"]))
            self.current = step

    # -- batches -----------------------------------------------------------------------
    def batch(self, step: int, slot: int) -> Any:
        """The micro-batch of `slot` at `step`."""
        self.current = max(self.current, step)
        if self.pipeline_config is not None and slot in self.own:
            parts = self._own_batches(step)
            if parts is not None:
                return parts[slot - self.own[0]]
        return self.make(step, slot)

    def make(self, step: int, slot: int) -> Any:
        """The slot's batch made in this process: fetch, stages, collate."""
        import torch

        epoch, start, stop = self.schedule.positions(step, slot)
        size = self.schedule.size
        indices = schedule_entries(self.seed, epoch, size, np.arange(start, stop), True)
        samples = [self._staged(int(i), epoch) for i in indices]
        return to_torch(default_collate(samples), torch)

    def _staged(self, index: int, epoch: int) -> Any:
        sample = self.dataset[index]
        if not self.stages:
            return sample
        if self._clients is None:
            info = WorkerInfo("trainer", 0, self.rank)
            self._clients = [stage.client(info) for stage in self.stages]
        ctx = SampleContext(index, epoch, sample_seed(self.seed, epoch, index), self.rank)
        for client in self._clients:
            sample = client.process(sample, ctx)
        return sample

    def _own_batches(self, step: int) -> list | None:
        """This step's own slots from the pipeline (None: a step it has passed)."""
        if self._held is not None and self._held[0] == step:
            return self._held[1]
        pipe = self._pipe()
        epoch, origin, into = self.schedule.where(step)
        position = origin + into * self.schedule.global_batch
        if (pipe.epoch, pipe.position()) != (epoch, position):
            if self._held is not None and step < self._held[0]:
                return None  # behind the pipeline: made in process
            self._held = None  # the batch leaves the shared memory slot free
            cfg = pipe.config
            pipe.load_state_dict(
                {
                    "epoch": epoch,
                    "position": position,
                    "seed": cfg.seed,
                    "dataset_len": len(pipe.dataset),
                    "shuffle": cfg.shuffle,
                }
            )
        self._held = None
        batch = next(pipe)
        self._held = (step, split(batch, self.accum))
        return self._held[1]

    def _pipe(self):
        if self._pipeline is None:
            from driver.data.pipeline import DataPipeline

            sched = self.schedule
            world = sched.slots // self.accum
            config = replace(self.pipeline_config, batch_size=sched.micro_batch * self.accum,
                             seed=self.seed, shuffle=True, drop_last=True)  # fmt: skip
            self._pipeline = DataPipeline(
                self.dataset, config, rank=self.rank, world_size=world, stages=self.stages
            )
        return self._pipeline

    def close(self) -> None:
        self._held = None
        if self._pipeline is not None:
            self._pipeline.close()
        for client in self._clients or ():
            client.close()
        self._clients = None


def split(batch: Any, parts: int) -> list:
    """A batch (tensor, tuple/list or dict of tensors) cut into `parts` equal micro-batches
    along the first dimension."""
    if parts == 1:
        return [batch]
    if isinstance(batch, dict):
        cut = {key: split(value, parts) for key, value in batch.items()}
        return [{key: cut[key][i] for key in batch} for i in range(parts)]
    if isinstance(batch, tuple | list):
        cut = [split(value, parts) for value in batch]
        return [type(batch)(c[i] for c in cut) for i in range(parts)]
    return list(batch.chunk(parts))


def to_torch(tree: Any, torch=None) -> Any:
    """numpy leaves of a collated batch (tuples, lists, dicts) as torch tensors."""
    if torch is None:
        import torch
    if isinstance(tree, dict):
        return {key: to_torch(value, torch) for key, value in tree.items()}
    if isinstance(tree, tuple | list):
        return type(tree)(to_torch(value, torch) for value in tree)
    if isinstance(tree, np.ndarray):
        return torch.from_numpy(tree)
    return tree
