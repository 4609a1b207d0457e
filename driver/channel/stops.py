"""Stopping a run early through its channel: the driver's signals become a notice that the
workers poll.

    stops = StopRelay(log).install()             # driver: SIGTERM or SIGINT ...
    stops.attach(channel)                        # ... -> a notice in the run's channel
    guard = PreemptionGuard(ckpt, poll=NoticePoll(client).first)   # worker: sees the notice

Ray Train runs the training function in a thread of each worker actor, so workers never
see the pod's signal themselves (and an embedded Ray's processes run in a session of their
own, driver/embedded/lean.py, so a Ctrl-C at the terminal never reaches them): the driver
catches SIGTERM and SIGINT and leaves a notice in the run's channel (driver.channel.state's
RunControl), which workers poll without blocking after every step (rank 0; under torchft
every replica group). The same poll brings the terminations of workers' pods
(driver.trainer.signals).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable


class NoticePoll:
    """Polls the run's channel (a driver.channel client) without blocking: one request in
    flight at a time, a new one at most every `interval_s` seconds. `ranks`: the ranks whose
    pods' terminations concern this worker (None: any rank's, as in a world that stops as
    one). Every accessor gives the newest answer, None before one arrives:

        notices = NoticePoll(client, ranks=[2, 3])
        notices.first()     # the run's notice or a pod's, whichever (a PreemptionGuard poll)
        notices.run()       # the run's notice alone (the driver's SIGTERM or SIGINT)
        notices.pods()      # the termination of a pod hosting one of `ranks`
    """

    def __init__(self, control, interval_s: float = 1.0, ranks: list[int] | None = None):
        self.control, self.interval_s = control, interval_s
        self.ranks = None if ranks is None else [int(r) for r in ranks]
        self.latest: dict = {}
        self._pending: int | None = None
        self._sent = 0.0

    def __call__(self) -> float | None:
        return self.first()

    def first(self) -> float | None:
        """The earlier of the run's notice and a concerning pod's termination, or None."""
        times = [t for t in (self.run(), self.pods()) if t is not None]
        return min(times, default=None)

    def run(self) -> float | None:
        return self._ask().get("run")

    def pods(self) -> float | None:
        return self._ask().get("pods")

    def _ask(self) -> dict:
        if self._pending is None:
            if time.monotonic() - self._sent < self.interval_s:
                return self.latest
            self._sent = time.monotonic()
            try:
                args = () if self.ranks is None else (self.ranks,)
                self._pending = self.control.request("notice", *args)
            except Exception:  # noqa: BLE001 (a driver gone a long while: ask again later)
                return self.latest
        try:
            done, answer = self.control.reply(self._pending, 0.0)
        except Exception:  # noqa: BLE001 (refused: ask again later)
            done, answer = True, None
        if done:
            self._pending = None
            if isinstance(answer, dict):
                self.latest = {k: answer.get(k) for k in ("run", "pods")}
        return self.latest


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

        stops = StopRelay(print, grace_s=35).install()   # main thread, before Ray starts
        stops.attach(control, progress.log)     # once the workers can hear it
        ...
        stops.restore()                         # the previous handlers

    With `grace_s`, the run ends within that many seconds of the first signal whatever it
    is doing, and a second signal ends it at once, even while the main thread is held in
    native code (a cloud client retrying, where no Python handler runs): a watcher thread
    hears every signal through the interpreter's wakeup fd (`StopWatch`).
    """

    def __init__(self, log: Callable[[str], None], signals: tuple[int, ...] = STOP_SIGNALS,
                 grace_s: float | None = None):  # fmt: skip
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
        self.watch = StopWatch(signals, grace_s) if grace_s else None

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
            if self.watch is not None:
                self.watch.start()
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
            if self.watch is not None:  # after a signal it keeps the deadline to the end
                self.watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)


class StopWatch:
    """Hears stop signals whatever the main thread does: the interpreter's C-level handler
    writes each signal's number to a pipe (`signal.set_wakeup_fd`) before any Python
    handler runs, and a thread reads it. After the first, the process ends
    `grace_s` later unless it ended first; a second ends it at once. Both with one line on
    stderr and 128 + the first signal as the exit code."""

    def __init__(self, signals: tuple[int, ...], grace_s: float):
        self.signals, self.grace_s = signals, grace_s
        self.first: int | None = None
        self._fds: tuple[int, int] | None = None
        self._previous_fd = -1

    def start(self) -> None:
        """Main thread only; again after another library replaced the wakeup fd."""
        if self._fds is None:
            read, write = os.pipe()
            os.set_blocking(write, False)
            self._fds = (read, write)
            threading.Thread(target=self._run, args=(read,), name="stop-watch",
                             daemon=True).start()  # fmt: skip
        previous = signal.set_wakeup_fd(self._fds[1], warn_on_full_buffer=False)
        if previous != self._fds[1]:
            self._previous_fd = previous

    def stop(self) -> None:
        if self._fds is None or threading.current_thread() is not threading.main_thread():
            return
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._fds[1])  # the thread reads end-of-file and ends
        self._fds = None

    def _run(self, read: int) -> None:
        deadline = None
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            poller = select.poll()  # not select(): a descriptor past 1023 is refused there
            poller.register(read, select.POLLIN)
            if not poller.poll(None if wait is None else wait * 1000):  # the grace period is over
                self._end(f"did not stop within {self.grace_s:g} s of {_name(self.first)}")
            data = os.read(read, 64)
            if not data:
                os.close(read)
                return
            for signum in data:
                if signum not in self.signals:
                    continue
                if self.first is None:
                    self.first, deadline = signum, time.monotonic() + self.grace_s
                else:
                    self._end(f"{_name(signum)} again after {_name(self.first)}")

    def _end(self, why: str) -> None:
        os.write(2, f"stopped: {why}: ending now\n".encode())
        os._exit(128 + (self.first or signal.SIGTERM))


def _name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum else "a signal"
