"""The checkpoint control channel between the driver and its Ray Train workers.

    control = start_channel()                    # driver: the run's one small actor
                                                 # (driver.telemetry.RunChannel)
    stop_relay = relay_sigterm(control, log)     # driver: SIGTERM -> a preemption notice
    attempt = ray.get(control.start.remote(rank))   # worker: 0, then 1, 2 ... after restarts
    guard = PreemptionGuard(ckpt, poll=NoticePoll(control))   # worker: sees the notice

Ray Train runs the training function in a thread of each worker actor, so workers never
see the pod's signal themselves: the driver catches SIGTERM and leaves a notice in the
actor, which rank 0 polls without blocking after every step. The same actor counts the
starts of each rank, so a worker knows it belongs to a restarted worker group (and then
resumes from the run's newest committed checkpoint).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable


class RunControl:
    """Actor body: attempt counts per rank and the time of a preemption notice."""

    def __init__(self) -> None:
        self.starts: dict[int, int] = {}
        self.notice_at: float | None = None
        self.outcome: dict = {}

    def finish(self, outcome: dict) -> None:
        """Rank 0's final checkpoint metrics (Ray Train keeps only checkpoint reports')."""
        self.outcome = dict(outcome)

    def final(self) -> dict:
        return dict(self.outcome)

    def start(self, rank: int) -> int:
        """Record that `rank` started; how many times it had started before (the attempt)."""
        attempt = self.starts.get(rank, 0)
        self.starts[rank] = attempt + 1
        return attempt

    def restarts(self) -> int:
        """Worker-group restarts so far."""
        return max(self.starts.values(), default=1) - 1

    def preempt(self, at: float) -> None:
        """A preemption notice that arrived at wall-clock time `at` (the first one counts)."""
        if self.notice_at is None:
            self.notice_at = at

    def notice(self) -> float | None:
        return self.notice_at


class NoticePoll:
    """Polls the control actor without blocking: one request in flight at a time, a new
    one at most every `interval_s` seconds."""

    def __init__(self, control, interval_s: float = 1.0):
        self.control, self.interval_s = control, interval_s
        self._pending = None
        self._sent = 0.0

    def __call__(self) -> float | None:
        """The notice's wall-clock time once one has arrived, else None."""
        import ray

        if self._pending is None:
            if time.monotonic() - self._sent < self.interval_s:
                return None
            self._sent = time.monotonic()
            self._pending = self.control.notice.remote()
        ready, _ = ray.wait([self._pending], timeout=0)
        if not ready:
            return None
        ref, self._pending = self._pending, None
        return ray.get(ref)


def relay_sigterm(control, log: Callable[[str], None]) -> Callable[[], None]:
    """Turn the driver's first SIGTERM into a notice in `control` (a second SIGTERM acts as
    usual). Returns a function that restores the previous handler. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    arrived = threading.Event()
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)
    stamp: list[float] = []

    def handle(signum, frame) -> None:  # signal context: record, let the thread do the rest
        stamp.append(time.time())
        signal.signal(signal.SIGTERM, previous)
        arrived.set()

    def relay() -> None:
        while not arrived.wait(0.2):
            if stop.is_set():
                return
        log("SIGTERM: asking the workers for a final checkpoint, then stopping")
        control.preempt.remote(stamp[0])

    signal.signal(signal.SIGTERM, handle)
    thread = threading.Thread(target=relay, name="sigterm-relay", daemon=True)
    thread.start()

    def restore() -> None:
        stop.set()
        if not arrived.is_set():
            signal.signal(signal.SIGTERM, previous)
        thread.join(timeout=5)

    return restore
