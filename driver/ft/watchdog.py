"""A replica group member's liveness watchdog: a member that hangs, not only one that dies,
ends its group's attempt within `ft.watchdog_s`.

    watchdog = Watchdog(cfg.ft.watchdog_s, log)
    with watchdog.step(step):        # the stepper's step: quorum, forward/backward, reduce
        ...

A member that dies is seen by Ray Train (its actor is gone) and its whole replica group is
replaced (driver.ft.backend). A member that hangs is not: its actor still answers Ray
Train's health checks (they run beside the training thread), or, stopped (SIGSTOP), it hangs
its group mates in their next collective inside the group. So each member watches its own
step: one that has run for longer than `ft.watchdog_s` (a step, not a checkpoint save: the
watch is armed only inside the step) ends the process at once with SIGKILL, after a log
line; its mates, stuck in a collective with a stopped member, do the same; Ray Train then
replaces the group, killing what is left of it, and the new group heals from a live one.
`ft.watchdog_s` must exceed the longest healthy step, quorum wait included
(`ft.quorum_timeout_s`); the driver also sets Ray Train's health-check timeout to it, so a
stopped member alone in its group is replaced as soon.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time


class Watchdog:
    """Ends this process when a step outlives `timeout_s` (None or 0: never)."""

    def __init__(self, timeout_s: float | None, log=None, clock=time.monotonic):
        self.timeout_s, self.log, self.clock = timeout_s, log, clock
        self._armed_at: float | None = None
        self._step = -1
        self._wake = threading.Event()
        if timeout_s:
            threading.Thread(target=self._watch, name="ft-watchdog", daemon=True).start()

    @contextlib.contextmanager
    def step(self, step: int):
        self._step, self._armed_at = step, self.clock()
        try:
            yield
        finally:
            self._armed_at = None

    def overdue(self) -> float | None:
        """Seconds the armed step is past its limit (None: not armed, or in time)."""
        armed = self._armed_at
        if armed is None or not self.timeout_s:
            return None
        late = self.clock() - armed - self.timeout_s
        return late if late > 0 else None

    def _watch(self) -> None:
        period = max(0.05, min(1.0, self.timeout_s / 10))
        while not self._wake.wait(period):
            if self.overdue() is not None:
                if self.log is not None:
                    self.log.error("ft: step %d made no progress for %.0f s (ft.watchdog_s): "
                                   "this member ends so its group is replaced", self._step,
                                   self.timeout_s)  # fmt: skip
                os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        self._wake.set()
