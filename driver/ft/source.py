"""The batch source under torchft: micro-batches addressed by (step, slot), not a per-rank
iterator, so whichever live group a slot is planned on (driver.ft.batch) gets the same
samples a failure-free run would train on.

    source = SlotSource(dataset, micro_batch=16, slots=groups * grad_accum, seed=0)
    batch = source.batch(step=7, slot=3)     # samples slot_sample_ids(7, 3, slots, 16)

Global sample id `i` is example `epoch_order(len(dataset), i // len, seed)[i % len]`: every
epoch is one seeded permutation of the dataset (driver.batches' order), consumed in slot
order. Stateless (the step is the position), so a checkpoint needs nothing from it.
"""

from __future__ import annotations

from typing import Any

from driver.batches import collate, epoch_order
from driver.ft.batch import slot_sample_ids


class SlotSource:
    """Micro-batches of a map-style dataset by global (step, slot)."""

    def __init__(self, dataset, micro_batch: int, slots: int, seed: int):
        if len(dataset) < micro_batch:
            raise ValueError(f"dataset of {len(dataset)} examples < one micro-batch")
        self.dataset, self.micro_batch, self.slots, self.seed = dataset, micro_batch, slots, seed
        self._orders: dict[int, Any] = {}

    def sample_ids(self, step: int, slot: int) -> range:
        return slot_sample_ids(step, slot, self.slots, self.micro_batch)

    def indices(self, step: int, slot: int) -> list[int]:
        """Dataset indices of the slot's samples."""
        size = len(self.dataset)
        return [int(self._order(i // size)[i % size]) for i in self.sample_ids(step, slot)]

    def _order(self, epoch: int):
        if epoch not in self._orders:
            if len(self._orders) > 1:  # a slot spans at most two epochs
                self._orders.clear()
            self._orders[epoch] = epoch_order(len(self.dataset), epoch, self.seed)
        return self._orders[epoch]

    def batch(self, step: int, slot: int):
        return collate([self.dataset[i] for i in self.indices(step, slot)])

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
