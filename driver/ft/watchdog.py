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
`ft.watchdog_s` must exceed the longest healthy step and `ft.timeout_s` (a live group waits
that long in a collective with a hung one, then runs the step again), and be at most
`ft.quorum_timeout_s`: a hung group's members still heartbeat, so the Lighthouse keeps the
live groups' next quorum waiting until the hung group's watchdog ends it (it started its
step first, so it fires first). The driver also sets Ray Train's health-check timeout to
it.

A stopped member never ends by itself, and Ray's kill of its actor has been seen not to end
it either: its placement-group bundle stays taken, and the group's replacement waits for
it for good. So a member whose watchdog fires first ends its group mates on the same host
(`mates`: their process ids, gathered once at the start, `group_mates`), stopped ones
included, then itself. A replica group is a node's workers, in one pod: one process
namespace.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time


class Watchdog:
    """Ends this process when a step outlives `timeout_s` (None or 0: never)."""

    def __init__(self, timeout_s: float | None, log=None, clock=time.monotonic,
                 mates: list[int] | None = None, watch: bool = True):  # fmt: skip
        """`watch=False`: no thread, only `overdue` (a test of the arithmetic must not
        have a thread that SIGKILLs its process on the test's fake clock)."""
        self.timeout_s, self.log, self.clock = timeout_s, log, clock
        self.mates = list(mates or [])
        """Process ids of this group's other members on this host, ended with this one."""
        self._armed_at: float | None = None
        self._step = -1
        self._wake = threading.Event()
        if timeout_s and watch:
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
                                   "this member ends, with %d group mates on this host, so "
                                   "its group is replaced", self._step, self.timeout_s,
                                   len(self.mates))  # fmt: skip
                for pid in self.mates:  # a stopped mate too: SIGKILL ends it
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        self._wake.set()


def group_mates() -> list[int]:
    """Process ids of this replica group's other members on this host: one all-gather of
    (host, pid) over the group's CPU collectives (under torchft the default process group
    is the replica group), integers only. Every member calls it at the same point."""
    import hashlib
    import socket

    import torch
    import torch.distributed as dist

    from driver.checkpoint.groups import training_cpu_group

    if not dist.is_initialized() or dist.get_world_size() <= 1:
        return []
    # 56 bits of the host name's hash: a positive int64, and no collision between hosts
    host = int.from_bytes(hashlib.blake2b(socket.gethostname().encode(), digest_size=7).digest())
    mine = torch.tensor([host, os.getpid()], dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine, group=training_cpu_group())
    pairs = [tuple(int(v) for v in t.tolist()) for t in every]
    return [pid for h, pid in pairs if h == host and pid != os.getpid()]
