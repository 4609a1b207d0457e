"""Fault injection for drills and tests (`debug.*`): a lost worker, a hung one, a raising one.

    faults = Faults(cfg.debug, rank, attempt)
    faults.at(step, "before")       # the steppers call it at their points of the step
    faults.at(step, "during")       # inside the cross-group reduce (torchft) or the sync
    faults.at(step, "after")        # after the step's row left (driver.trainer.hooks)

- `debug.kill_at_step` / `kill_rank` / `kill_phase`: SIGKILL that rank's process there (a
  worker pod lost), on its first start only: its replacement trains on.
- `debug.stop_at_step` / `kill_rank`: SIGSTOP it before the step's forward pass (a hung
  worker: the replica group's liveness watchdog must notice, driver.ft.watchdog).
- `debug.fail_at_step` / `fail_rank` (-1: every rank): raise after the step's row left.
- `debug.digest`: `param_digest(model)` for each rank's row.
"""

from __future__ import annotations

import hashlib
import os
import signal

PHASES = ("before", "during", "after")


class Faults:
    """The injection points of one rank."""

    def __init__(self, debug, rank: int, attempt: int = 0):
        self.debug, self.rank, self.attempt = debug, rank, attempt

    def at(self, step: int, phase: str) -> None:
        """At `phase` of 0-based `step`: do what the config asks of this rank, if anything."""
        d = self.debug
        first = self.attempt == 0 and self.rank == d.kill_rank
        if first and d.kill_at_step == step and d.kill_phase == phase:
            os.kill(os.getpid(), signal.SIGKILL)
        if first and d.stop_at_step == step and phase == "before":
            os.kill(os.getpid(), signal.SIGSTOP)
        if phase == "after" and d.fail_at_step == step and d.fail_rank in (-1, self.rank):
            message = f"debug.fail_at_step={step}: injected failure on rank {self.rank}"
            raise RuntimeError(message)


def param_digest(model) -> float:
    """A hash of this rank's parameters (its local shards), exact in a float64: equal
    digests are equal bytes."""
    import torch

    h = hashlib.blake2b(digest_size=6)
    for _, param in sorted(model.named_parameters()):
        local = param.to_local() if hasattr(param, "to_local") else param
        h.update(local.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return float(int.from_bytes(h.digest(), "big"))
