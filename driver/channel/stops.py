"""Stopping a run early through its channel: the driver's signals become a notice that the
workers poll.

    stops = StopRelay(log).install()             # driver: SIGTERM or SIGINT ...
    stops.attach(channel)                        # ... -> a notice in the run's channel
    guard = PreemptionGuard(ckpt, poll=NoticePoll(client))   # worker: sees the notice

Ray Train runs the training function in a thread of each worker actor, so workers never
see the pod's signal themselves (and an embedded Ray's processes run in a session of their
own, driver/embedded/lean.py, so a Ctrl-C at the terminal never reaches them): the driver
catches SIGTERM and SIGINT and leaves a notice in the run's channel (driver.channel.state's
RunControl), which rank 0 polls without blocking after every step.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable


class NoticePoll:
    """Polls the run's channel (a driver.channel client) without blocking: one request in
    flight at a time, a new one at most every `interval_s` seconds."""

    def __init__(self, control, interval_s: float = 1.0):
        self.control, self.interval_s = control, interval_s
        self._pending: int | None = None
        self._sent = 0.0

    def __call__(self) -> float | None:
        """The notice's wall-clock time once one has arrived, else None."""
        if self._pending is None:
            if time.monotonic() - self._sent < self.interval_s:
                return None
            self._sent = time.monotonic()
            try:
                self._pending = self.control.request("notice")
            except Exception:  # noqa: BLE001 (a driver gone a long while: ask again later)
                return None
        done, notice = self.control.reply(self._pending, 0.0)
        if not done:
            return None
        self._pending = None
        return notice


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""What stops a run early: a preemption notice (SIGTERM, GKE's) and Ctrl-C (SIGINT)."""


class Interrupted(KeyboardInterrupt):  # noqa: N818 (a KeyboardInterrupt, not an error)
    """A stop signal arrived while no worker could act on it (start-up, or a run without
    checkpoints): the driver stops at once. A KeyboardInterrupt, so no library swallows it
    and Ray's blocking calls give up (they re-raise a plain KeyboardInterrupt: the signal is
    then `StopRelay.signum`)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRelay:
    """The driver's first SIGTERM or SIGINT: a notice in the run's channel, which the
    workers turn into a final checkpoint and an orderly stop (a second signal acts as usual:
    the process ends at once). Before `attach` (start-up), or attached to no channel
    (no checkpoints), the signal raises `Interrupted` in the main thread instead.

        stops = StopRelay(print).install()      # main thread, before Ray starts
        stops.attach(control, progress.log)     # once the workers can hear it
        ...
        stops.restore()                         # the previous handlers
    """

    def __init__(self, log: Callable[[str], None], signals: tuple[int, ...] = STOP_SIGNALS):
        self.log, self.signals = log, signals
        self.signum: int | None = None
        """The first stop signal that arrived (None: none)."""
        self.at: float | None = None
        self._control = None
        self._attached = False
        self._holding = False
        self._previous: dict[int, object] = {}
        self._arrived = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str | None:
        return signal.Signals(self.signum).name if self.signum else None

    def install(self) -> StopRelay:
        """Handle the signals from now on (main thread only; elsewhere a no-op). Called
        again after Ray started: Ray's core worker installs its own SIGTERM handler."""
        if threading.current_thread() is threading.main_thread() and self.signum is None:
            for signum in self.signals:
                previous = signal.signal(signum, self._handle)
                self._previous.setdefault(signum, previous)
        return self

    def attach(self, control, log: Callable[[str], None] | None = None) -> None:
        """From now on a signal becomes a notice in `control` (None: `Interrupted`)."""
        self.log = log or self.log
        self._control, self._attached = control, True
        self.install()
        if control is not None and self._previous:
            self._thread = threading.Thread(target=self._relay, name="stop-relay", daemon=True)
            self._thread.start()

    @contextlib.contextmanager
    def held(self):
        """Within the block a stop signal is recorded and raises nothing; it raises
        `Interrupted` as the block ends (also when the block raised: the signal came first
        to the user). For `ray.init`: an exception raised in the middle of it leaves Ray's
        core worker half made, and the process can crash as it exits. The handlers are put
        back as the block ends, in case the block replaced one (Ray's own SIGTERM handler
        exits at once: driver/embedded/lean.py keeps `ray.init` from installing it)."""
        self._holding = True
        try:
            yield self
        except BaseException as err:
            self._holding = False
            if self._interrupts():
                raise Interrupted(self.signum) from err
            raise
        self._holding = False
        self.install()
        if self._interrupts():
            raise Interrupted(self.signum)

    def _interrupts(self) -> bool:
        """Whether the recorded signal interrupts (no worker can hear it yet)."""
        return self.signum is not None and (self._control is None or not self._attached)

    def _handle(self, signum, frame) -> None:  # signal context: record, let a thread relay
        first = self.signum is None
        if first:
            self.signum, self.at = signum, time.time()
        for each in self.signals:  # a second signal of either kind ends the process at once
            signal.signal(each, signal.SIG_DFL)
        if self._holding:
            return
        if self._control is None or not self._attached:
            raise Interrupted(signum)
        self._arrived.set()

    def _relay(self) -> None:
        self._arrived.wait()  # set by a signal, or by `restore`: no wake-ups until then
        if self.signum is None:
            return
        self.log(f"{self.name}: asking the workers for a final checkpoint, then stopping "
                 "(again to stop at once)")  # fmt: skip
        self._control.preempt(self.at)

    def restore(self) -> None:
        """Stop relaying; the handlers in place before `install` (unless a signal came:
        then a second one keeps its default action)."""
        self._arrived.set()  # wakes the relay thread, which relays a signal that came
        if self.signum is None:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
        if self._thread is not None:
            self._thread.join(timeout=5)
