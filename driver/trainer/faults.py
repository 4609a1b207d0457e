"""Fault injection for drills and tests (`debug.*`): a lost worker, a hung one, a raising one.

    faults = Faults(cfg.debug, rank, attempt)
    faults.at(step, "before")       # the steppers call it at their points of the step
    faults.at(step, "during")       # inside the cross-group reduce (torchft) or the sync
    faults.at(step, "after")        # after the step's row left (driver.trainer.hooks)

- `debug.kill_at_step` / `kill_rank` / `kill_phase`, and `debug.kills` (`STEP:RANK[:PHASE]`
  each): SIGKILL that rank's process there (a worker pod lost), once in the run.
- `debug.stop_at_step` / `kill_rank`: SIGSTOP it before the step's forward pass (a hung
  worker: the replica group's liveness watchdog must notice, driver.ft.watchdog).
- `debug.term_at_step` / `kill_rank`: SIGTERM it before the step's forward pass (its pod
  is being terminated: driver.trainer.signals); the marker file holds the signal's time.
- `debug.fail_at_step` / `fail_rank` (-1: every rank): raise after the step's row left;
  with `debug.hold_replacement_s`, that rank started again waits so long before it joins
  (a replacement that finds no capacity).
- `debug.digest`: `param_digest(model)` for each rank's row.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

PHASES = ("before", "during", "after")


class Faults:
    """The injection points of one rank. A kill or a stop fires once in the run: a marker
    file in `marks` (the run's output folder) records it, so a restart that replays the step
    (and a replacement) goes on."""

    def __init__(self, debug, rank: int, attempt: int = 0, marks: str | None = None):
        self.debug, self.rank, self.attempt = debug, rank, attempt
        self.marks = Path(marks) / ".faults" if marks else None
        self.kills = kill_table(debug)

    def before_start(self) -> None:
        """Before this rank joins the run: a started-again `fail_rank` (a replacement)
        waits `debug.hold_replacement_s`."""
        d = self.debug
        failing = d.fail_at_step is not None and d.fail_rank in (-1, self.rank)
        if failing and self.attempt > 0 and d.hold_replacement_s > 0:
            time.sleep(d.hold_replacement_s)

    def at(self, step: int, phase: str) -> None:
        """At `phase` of 0-based `step`: do what the config asks of this rank, if anything."""
        d = self.debug
        if (step, self.rank, phase) in self.kills and self._once(f"kill-{step}-{self.rank}"):
            os.kill(os.getpid(), signal.SIGKILL)
        stop = self.rank == d.kill_rank and d.stop_at_step == step and phase == "before"
        if stop and self._once(f"stop-{step}-{self.rank}"):
            os.kill(os.getpid(), signal.SIGSTOP)
        term = self.rank == d.kill_rank and d.term_at_step == step and phase == "before"
        if term and self._once(f"term-{step}-{self.rank}", note=f"{time.time()!r}"):
            os.kill(os.getpid(), signal.SIGTERM)
        if phase == "after" and d.fail_at_step == step and d.fail_rank in (-1, self.rank):
            message = f"debug.fail_at_step={step}: injected failure on rank {self.rank}"
            raise RuntimeError(message)

    def _once(self, name: str, note: str = "") -> bool:
        """Whether this fault has not fired yet in the run (and now has; its marker file
        holds `note`)."""
        if self.marks is None:
            return self.attempt == 0
        self.marks.mkdir(parents=True, exist_ok=True)
        try:
            with (self.marks / name).open("x") as mark:
                mark.write(note)
        except FileExistsError:
            return False
        return True


def kill_table(debug) -> set[tuple[int, int, str]]:
    """(step, rank, phase) of every kill the config asks for."""
    out = set()
    if debug.kill_at_step is not None:
        out.add((int(debug.kill_at_step), int(debug.kill_rank), debug.kill_phase))
    for entry in getattr(debug, "kills", None) or ():
        step, rank, *phase = str(entry).split(":")
        out.add((int(step), int(rank), phase[0] if phase else "after"))
    return out


def param_digest(model) -> float:
    """A hash of this rank's parameters (its local shards), exact in a float64: equal
    digests are equal bytes."""
    import torch

    h = hashlib.blake2b(digest_size=6)
    for _, param in sorted(model.named_parameters()):
        local = param.to_local() if hasattr(param, "to_local") else param
        h.update(local.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return float(int.from_bytes(h.digest(), "big"))
