"""The in-process batch source: feeds one rank from a map-style dataset.

`LocalBatchSource(dataset, batch_size, rank, world_size, seed)` is the data hook of the
training loop: an endless iterator of collated batches (tensors) over this rank's share of a
seeded, per-epoch shuffle, with `state_dict()`/`load_state_dict()` so a resumed run continues
where it stopped. Any class with the same constructor and methods can replace it
(`data.source: module:Class`), e.g. a shared-memory pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def epoch_order(size: int, epoch: int, seed: int) -> np.ndarray:
    """The global order of examples in one epoch (the same on every rank)."""
    return np.random.default_rng([seed, epoch]).permutation(size)


def rank_indices(order: np.ndarray, rank: int, world_size: int, batch_size: int) -> np.ndarray:
    """This rank's indices: whole global batches only, rank-strided within each batch."""
    global_batch = batch_size * world_size
    usable = len(order) - len(order) % global_batch
    return order[:usable].reshape(-1, world_size, batch_size)[:, rank].reshape(-1)


def collate(items: list) -> Any:
    """Stack a list of examples (arrays, or tuples of arrays) into tensors."""
    import torch

    if isinstance(items[0], tuple):
        return tuple(torch.from_numpy(np.stack(parts)) for parts in zip(*items, strict=True))
    return torch.from_numpy(np.stack(items))


class LocalBatchSource:
    """Endless batches of one rank, in a seeded order that resumes exactly."""

    def __init__(self, dataset, batch_size: int, rank: int, world_size: int, seed: int):
        if len(dataset) < batch_size * world_size:
            raise ValueError(
                f"dataset of {len(dataset)} examples is smaller than one global batch "
                f"({batch_size} x {world_size} workers)"
            )
        self.dataset, self.batch_size = dataset, batch_size
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.epoch, self.batch_index = 0, 0

    def __iter__(self) -> Iterator[Any]:
        while True:
            indices = rank_indices(
                epoch_order(len(self.dataset), self.epoch, self.seed),
                self.rank,
                self.world_size,
                self.batch_size,
            )
            batches = len(indices) // self.batch_size
            while self.batch_index < batches:
                start = self.batch_index * self.batch_size
                self.batch_index += 1
                chunk = indices[start : start + self.batch_size]
                yield collate([self.dataset[int(i)] for i in chunk])
            self.epoch, self.batch_index = self.epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch_index": self.batch_index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.batch_index = int(state["epoch"]), int(state["batch_index"])


class PipelineSource:
    """The shared-memory pipeline (`driver.data.DataPipeline`: feeder, producer and collator
    processes) behind the same hook: endless, one pipeline epoch after another."""

    def __init__(self, dataset, batch_size: int, rank: int, world_size: int, seed: int):
        from driver.data import DataPipeline, PipelineConfig

        config = PipelineConfig(batch_size=batch_size, producers=1, seed=seed)
        self.pipeline = DataPipeline(dataset, config, rank=rank, world_size=world_size)

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self.pipeline

    def state_dict(self) -> dict[str, Any]:
        return self.pipeline.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pipeline.load_state_dict(state)

    def close(self) -> None:
        self.pipeline.close()
