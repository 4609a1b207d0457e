"""Which samples a training step's micro-batch slot holds: the one addressing every layout
uses (pure, no I/O).

A step's global batch is `slots` micro-batches of `micro_batch` samples: one slot per
training worker per accumulation step (`world × grad_accum`). Slot `k` of step `s` holds
the schedule positions that `driver.data.sampling.rank_slice` gives "rank" `k` of a world
of `slots` (drop_last), so the shared-memory pipeline of rank `r` (batch `micro_batch ×
grad_accum`, world `world`) yields exactly slots `r·grad_accum ... r·grad_accum +
grad_accum - 1`, and any other process computes any slot alike: a torchft replica group
that takes over a lost group's slots trains on the samples a failure-free run would have.

Epochs follow `sampling`: an epoch holds `steps_in_epoch` whole global batches from its
origin, the tail is dropped, the next epoch starts at position 0. A run that resumes with
another global batch (another shape) continues from the checkpoint's global position:
`Schedule.rebase(step, epoch, position)`.

    sched = Schedule(size=4096, micro_batch=16, slots=8)
    sched.where(step=40)                  # (epoch, the epoch's origin, steps into it)
    sched.positions(step=40, slot=3)      # (start, stop) in that epoch's schedule
    sched.state(step=40)                  # {"epoch", "position"}: a checkpoint's data state
"""

from __future__ import annotations

from dataclasses import dataclass

from driver.data.sampling import rank_slice, steps_in_epoch


@dataclass(frozen=True)
class Schedule:
    """Step and slot -> schedule positions, from an anchor (step, epoch, position)."""

    size: int
    """Samples in the dataset."""
    micro_batch: int
    """Samples per slot."""
    slots: int
    """Slots per step (workers × gradient accumulation at the run's start)."""
    anchor_step: int = 0
    """A step whose first sample is at (`anchor_epoch`, `anchor_position`)."""
    anchor_epoch: int = 0
    anchor_position: int = 0

    def __post_init__(self):
        if self.micro_batch < 1 or self.slots < 1:
            raise ValueError(f"micro_batch and slots must be >= 1 ({self})")
        if self.size < self.global_batch:
            raise ValueError(
                f"dataset of {self.size} examples is smaller than one global batch "
                f"({self.micro_batch} x {self.slots} slots)"
            )

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.slots

    def _epoch_steps(self, origin: int) -> int:
        return steps_in_epoch(self.size, self.micro_batch, self.slots, origin, True)

    def where(self, step: int) -> tuple[int, int, int]:
        """(epoch, origin of that epoch's layout, steps into it) for a step at or after the
        anchor; the step's first sample is at origin + steps × global batch."""
        if step < self.anchor_step:
            raise ValueError(f"step {step} is before the schedule's anchor {self.anchor_step}")
        epoch, origin, left = self.anchor_epoch, self.anchor_position, step - self.anchor_step
        first = self._epoch_steps(origin)
        if left < first:
            return epoch, origin, left
        left -= first
        per_epoch = self._epoch_steps(0)
        return epoch + 1 + left // per_epoch, 0, left % per_epoch

    def positions(self, step: int, slot: int) -> tuple[int, int, int]:
        """(epoch, start, stop): the slot's samples are the epoch's schedule at start..stop."""
        epoch, origin, into = self.where(step)
        start, stop = rank_slice(into, slot, self.size, self.micro_batch, self.slots, origin, True)
        return epoch, start, stop

    def state(self, step: int) -> dict[str, int]:
        """The data position before `step`: what a checkpoint at `step` stores."""
        epoch, origin, into = self.where(step)
        return {"epoch": epoch, "position": origin + into * self.global_batch}

    def rebase(self, step: int, epoch: int, position: int) -> Schedule:
        """The schedule whose `step` starts at (epoch, position): a resume, possibly with
        another global batch. A position that leaves no whole global batch in its epoch
        starts the next epoch."""
        if position > self.size - self.global_batch:
            epoch, position = epoch + 1, 0
        return Schedule(self.size, self.micro_batch, self.slots, step, epoch, position)


def own_slots(rank: int, grad_accum: int) -> tuple[int, ...]:
    """The slots of a worker in a failure-free step: `grad_accum` of them from
    `rank × grad_accum` (the rank's pipeline yields them as one batch)."""
    return tuple(range(rank * grad_accum, (rank + 1) * grad_accum))
