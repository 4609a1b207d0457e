"""Preemption: on SIGTERM, save a final checkpoint when it can finish in time, then stop.

guard = PreemptionGuard(checkpointer, poll=notice).install()   # poll: optional, see below
for step in ...:
    train_step(...)
    if guard.on_step_end(step, state):   # SIGTERM arrived: final save done (or skipped)
        break                            # the loop exits; the pod ends with the signal
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("driver.checkpoint")


def estimate_save_s(durations: list[float], margin: float = 1.25) -> float | None:
    """Expected seconds for one more save: the slowest of the last five, with a margin;
    None without any history."""
    if not durations:
        return None
    return max(durations[-5:]) * margin


def final_save_decision(
    remaining_s: float, estimate_s: float | None, step: int, last_saved: int | None
) -> tuple[bool, str]:
    """Whether to write a final checkpoint in the time left before the kill, and why."""
    if last_saved == step:
        return False, f"step {step} is already checkpointed"
    if remaining_s <= 0:
        return False, "no time left"
    if estimate_s is None:
        return True, f"no earlier save to estimate from; trying within {remaining_s:.1f}s"
    if estimate_s > remaining_s:
        return False, f"a save takes ~{estimate_s:.1f}s, only {remaining_s:.1f}s left"
    return True, f"a save takes ~{estimate_s:.1f}s, {remaining_s:.1f}s left"


def first_of(*polls: Callable[[], float | None] | None) -> Callable[[], float | None] | None:
    """One notice poll from several (None entries skipped): the earliest time any gives,
    or None; None when no poll is given."""
    polls = tuple(p for p in polls if p is not None)
    if not polls:
        return None

    def first() -> float | None:
        return min((t for t in (p() for p in polls) if t is not None), default=None)

    return first


MAX_CHECK_GAP = 1000  # steps between agreements, at most (very short steps)


def check_gap(elapsed_s: float, steps: int, every_s: float) -> int:
    """Steps until the next agreement: as many as take about `every_s` at the pace of the
    last `steps` steps (`elapsed_s`); 1 when every_s is 0 or nothing was measured."""
    if every_s <= 0 or steps <= 0:
        return 1
    if elapsed_s <= 0:
        return MAX_CHECK_GAP
    return max(1, min(MAX_CHECK_GAP, int(every_s * steps / elapsed_s)))


@dataclass
class PreemptionGuard:
    """Turns SIGTERM into a request the training loop handles between steps.

    With several ranks, every rank must stop at the same step and agree on the final
    save: the ranks all-reduce the "signal seen" flag over the training thread's CPU group
    (the default group on gloo, a shared gloo group under nccl: `groups.training_cpu_group`;
    never the writer's, which a background save may be using), and rank 0's decision is
    broadcast. That all-reduce runs every `check_gap` steps, not after each one (a
    collective per step costs a short step a few percent): with the flag each rank sends
    the gap its own pace asks for, and all take the smallest, so every rank checks at the
    same steps.
    """

    checkpointer: object
    """The Checkpointer (its config.preemption_budget_s, durations and save/wait)."""
    signum: int = signal.SIGTERM
    requested_at: float | None = None
    """Monotonic time of the signal; None until one arrives."""
    poll: Callable[[], float | None] | None = None
    """Another source of the notice, asked after every step: the wall-clock time of a
    notice, or None (the training driver relays its own SIGTERM this way, because Ray Train
    runs the loop outside the worker's main thread, where no signal handler can be set)."""
    agreed: Callable[[], float | None] | None = None
    """A notice every rank learns after the same step (under torchft: the run's stop, carried
    by the step's reduce to every live group, driver.ft.leave): acted on at that step, not at
    the next scheduled agreement, so every group stops after the same step."""
    give_up: Callable[[], str | None] | None = None
    """Asked on rank 0 once the ranks agreed to stop, after the writes in flight: a reason
    to skip the final save (e.g. storage failing every save), or None."""

    def __post_init__(self) -> None:
        self.stopped_at: int | None = None
        """The step the loop stopped after, once a notice was handled."""
        self.reason = ""
        """Why the final checkpoint was (or was not) written."""
        self.final_saved = False
        """Whether the final checkpoint was written and committed."""
        self._previous = None
        self._distributed = bool(getattr(self.checkpointer, "_distributed", False))
        self._group = None  # the training thread's CPU group (None: the default group)
        self._next_check: int | None = None  # the step of the next agreement (None: the next)
        self._last_check = (0, 0.0)  # (step, monotonic time) of the last agreement
        if self._distributed:
            from driver.checkpoint.groups import training_cpu_group

            self._group = training_cpu_group()

    def install(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(self.signum, self._handle)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(self.signum, self._previous)
            self._previous = None

    def _handle(self, signum, frame) -> None:  # async-signal context: just record it
        if self.requested_at is None:
            self.requested_at = time.monotonic()

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def on_step_end(self, step: int, state) -> bool:
        """After each step: False to go on; True (after a final checkpoint if it fits) to stop."""
        agreed = self.agreed() if self.agreed is not None else None
        if self.requested_at is None:
            at = agreed if agreed is not None else self.poll() if self.poll else None
            if at is not None:  # the notice's age counts against the budget
                self.requested_at = time.monotonic() - max(0.0, time.time() - at)
        scheduled = self._next_check is None or step >= self._next_check
        if self._distributed and not scheduled and agreed is None:
            return False
        if not self._agree(step, self.requested_at is not None):
            return False
        ckpt = self.checkpointer
        started = self.requested_at if self.requested_at is not None else time.monotonic()
        deadline = started + ckpt.config.preemption_budget_s
        ckpt.wait()  # a write already in flight completes first
        remaining = deadline - time.monotonic()
        last = ckpt.counters["last_committed_step"]
        ok, why = final_save_decision(remaining, estimate_save_s(ckpt.write_durations), step, last)
        given_up = self.give_up() if self.give_up is not None else None
        if given_up:
            ok, why = False, given_up
        ok = self._from_rank0(ok)
        log.warning("preemption notice at step %d: %s", step, why)
        self.stopped_at, self.reason = step, why
        self.final_saved = bool(ok and ckpt.writes and ckpt.save(step, state) and ckpt.wait())
        return True

    def _agree(self, step: int, seen: bool) -> bool:
        """Whether any rank has seen the signal; also fixes the step of the next agreement."""
        if not self._distributed:
            return seen
        import torch
        import torch.distributed as dist

        now = time.monotonic()
        last_step, last_time = self._last_check
        measured = step - last_step if self._next_check is not None else 0
        gap = check_gap(now - last_time, measured, self.checkpointer.config.preemption_check_s)
        flag = torch.tensor([int(seen), -gap])  # MAX of -gap: the smallest gap of any rank
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        self._next_check, self._last_check = step - int(flag[1]), (step, now)
        return bool(flag[0])

    def _from_rank0(self, decision: bool) -> bool:
        if not self._distributed:
            return decision
        import torch.distributed as dist

        box = [decision]
        dist.broadcast_object_list(box, group=self._group, group_src=0)
        return bool(box[0])
