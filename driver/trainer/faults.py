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
- `debug.await_replacements_at_step`: after that step every rank waits until each rank
  killed so far has a replacement ready (`ready()` leaves a marker as a rank is about to
  train), so a drill's survivors see the replacement back however slowly processes start.
- `debug.digest`: `param_digest(model)` for each rank's row.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

PHASES = ("before", "during", "after")
AWAIT_S = 600.0
"""The longest `debug.await_replacements_at_step` waits before the rank fails the run."""


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

    def ready(self) -> None:
        """This rank is about to train: its marker, which an awaiting survivor reads (only
        in a drill that awaits replacements)."""
        if getattr(self.debug, "await_replacements_at_step", None) is not None:
            self._once(f"ready-{self.rank}-{self.attempt}")

    def at(self, step: int, phase: str) -> None:
        """At `phase` of 0-based `step`: do what the config asks of this rank, if anything."""
        d = self.debug
        killing = (step, self.rank, phase) in self.kills
        if killing and self._once(f"kill-{step}-{self.rank}", note=str(self.attempt)):
            os.kill(os.getpid(), signal.SIGKILL)
        stop = self.rank == d.kill_rank and d.stop_at_step == step and phase == "before"
        if stop and self._once(f"stop-{step}-{self.rank}"):
            os.kill(os.getpid(), signal.SIGSTOP)
        term = self.rank == d.kill_rank and d.term_at_step == step and phase == "before"
        if term and self._once(f"term-{step}-{self.rank}", note=f"{time.time()!r}"):
            os.kill(os.getpid(), signal.SIGTERM)
        if phase == "after" and getattr(d, "await_replacements_at_step", None) == step:
            self.await_replacements()
        if phase == "after" and d.fail_at_step == step and d.fail_rank in (-1, self.rank):
            message = f"debug.fail_at_step={step}: injected failure on rank {self.rank}"
            raise RuntimeError(message)

    def await_replacements(self, timeout_s: float | None = None) -> None:
        """Wait until every rank killed so far has a replacement ready (its marker), at
        most `timeout_s` (AWAIT_S)."""
        timeout_s = AWAIT_S if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while self.marks is not None:
            found = self.marks.iterdir() if self.marks.exists() else ()
            missing = replacements_missing({p.name: p.read_text() for p in found})
            if not missing:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"debug.await_replacements_at_step: no replacement of rank "
                                   f"{missing} ready within {timeout_s:g} s")  # fmt: skip
            time.sleep(0.2)

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


def replacements_missing(marks: dict[str, str]) -> list[int]:
    """The killed ranks without a replacement ready, from the markers ({name: note}): a
    kill (`kill-STEP-RANK`, its note the killed process's attempt) is answered by a start
    of that rank ready to train with a later attempt (`ready-RANK-ATTEMPT`). Attempts count
    from the run's first (a resumed run's first start is past 0), so only a later one is a
    replacement."""
    killed: dict[int, int] = {}
    ready: dict[int, int] = {}
    for name, note in marks.items():
        kind, *parts = name.split("-")
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            continue
        if kind == "kill":  # kill-STEP-RANK
            attempt = int(note) if note.strip().isdigit() else 0
            killed[int(parts[1])] = max(killed.get(int(parts[1]), -1), attempt)
        elif kind == "ready":  # ready-RANK-ATTEMPT
            ready[int(parts[0])] = max(ready.get(int(parts[0]), -1), int(parts[1]))
    return sorted(rank for rank, attempt in killed.items() if ready.get(rank, -1) <= attempt)


def param_digest(model) -> float:
    """A hash of this rank's parameters (its local shards), exact in a float64: equal
    digests are equal bytes."""
    import torch

    h = hashlib.blake2b(digest_size=6)
    for _, param in sorted(model.named_parameters()):
        local = param.to_local() if hasattr(param, "to_local") else param
        h.update(local.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return float(int.from_bytes(h.digest(), "big"))
