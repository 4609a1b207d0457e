"""A training worker hears its own termination: a SIGTERM to its process.

    watch = TerminationWatch(on_term=tell_the_driver).start()   # in the training thread
    ...
    watch.heard()       # the signal's wall-clock time, or None (a PreemptionGuard poll)
    watch.close()       # the handler that was there before, again

Ray Train runs the training function in a thread of the worker actor, where Python cannot
set a signal handler, and Ray's own handler on the actor's main thread raises SystemExit
there: the process ends, Ray Train sees a failed worker and tears the worker group down,
and nothing is saved. `start()` puts this watch's handler on the process's main thread
instead: directly when called there (a plain process), else through the worker actor's
own `execute` call, which Ray Train's worker actor runs on its main thread between its
status polls. The handler only records the time and wakes a relay thread, which calls
`on_term(at)` (the notice in the run's channel: driver.channel.state `terminating`). A
second SIGTERM goes to the handler that was there before (Ray's: the process ends at once).

What reaches a worker in a cluster (Ray 2.60; untested on a real cluster, docs/
checkpoint.md): Kubernetes sends SIGTERM to the pod's main process. Where that is the
pod's `ray start --block`, it marks its node draining in the GCS and waits
(`RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`, 30 s by default) before it stops the raylet,
which kills its workers without a signal they could act on; a driver that watched the
drain state could leave the same notice for the node's ranks (`terminating`), which is not
built yet. This watch hears a SIGTERM sent to the worker process itself.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from driver.trainer.hooks import Hook

log = logging.getLogger("driver.trainer")

_WATCH: TerminationWatch | None = None
"""The watch whose handler is installed in this process (one at a time)."""
_PREVIOUS: object = None
"""The SIGTERM handler before `_install`: a second signal goes there."""


class TerminationWatch:
    """This process's first SIGTERM, heard from any thread."""

    def __init__(self, on_term: Callable[[float], None] | None = None):
        self.on_term = on_term
        self.at: float | None = None
        """Wall-clock time of the signal (None: none yet)."""
        self.installed = False
        self._arrived = threading.Event()
        self._closed = False
        self._relay: threading.Thread | None = None

    def heard(self) -> float | None:
        """The signal's wall-clock time, or None."""
        return self.at

    def start(self) -> TerminationWatch:
        """Handle SIGTERM from now on (a no-op where no main thread can be reached)."""
        global _WATCH
        _WATCH = self
        self.installed = on_main_thread(_install)
        if self.installed and self.on_term is not None:
            self._relay = threading.Thread(target=self._relay_loop, name="term-relay",
                                           daemon=True)  # fmt: skip
            self._relay.start()
        return self

    def close(self) -> None:
        """The previous handler again; the relay thread ends."""
        global _WATCH
        self._closed = True
        self._arrived.set()
        if self.installed and _WATCH is self:
            on_main_thread(_uninstall)
            _WATCH = None
        if self._relay is not None:
            self._relay.join(timeout=5)

    def _signal(self) -> None:  # signal context, main thread: record, let a thread act
        if self.at is None:
            self.at = time.time()
        self._arrived.set()

    def _relay_loop(self) -> None:
        self._arrived.wait()  # set by the signal, or by `close`: no wake-ups until then
        if self.at is None:
            return
        log.warning("SIGTERM: this worker's pod is being terminated; telling the run")
        try:
            self.on_term(self.at)
        except Exception as err:  # noqa: BLE001 (the local stop still happens)
            log.warning("could not leave the termination notice: %s", err)


def _handle(signum, frame) -> None:
    watch = _WATCH
    if watch is None or watch.at is not None:  # a second signal: the usual action
        previous = _PREVIOUS
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # the default action: the process ends by it
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        return
    watch._signal()


def _install() -> bool:
    global _PREVIOUS
    previous = signal.signal(signal.SIGTERM, _handle)
    if previous is not _handle:
        _PREVIOUS = previous
    return True


def _uninstall() -> bool:
    if signal.getsignal(signal.SIGTERM) is _handle:
        signal.signal(signal.SIGTERM, _PREVIOUS if _PREVIOUS is not None else signal.SIG_DFL)
    return True


def on_main_thread(fn: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Run `fn` on this process's main thread: here when this is it, else through the Ray
    actor this process hosts (its `execute`, run on the actor's main thread). False where
    neither works (a thread of a plain process, an actor without `execute`)."""
    if threading.current_thread() is threading.main_thread():
        return fn()
    try:
        import ray

        if not ray.is_initialized():  # not a Ray worker (and never start a Ray here)
            raise RuntimeError("not in a Ray actor")
        actor = ray.get_runtime_context().current_actor
        return bool(ray.get(actor.execute.remote(fn), timeout=timeout_s))
    except Exception as err:  # noqa: BLE001 (no actor main thread to reach: no watch)
        log.warning("cannot hear SIGTERM in this worker: %s", err)
        return False


class TerminationHook(Hook):
    """Puts the process's previous SIGTERM handler back however the loop ends."""

    def __init__(self, watch: TerminationWatch):
        self.watch = watch

    def abandon(self, trainer) -> None:
        self.watch.close()

    def close(self, trainer, finished: bool) -> dict:
        self.watch.close()
        return {}


def hear_termination(cfg, channel, rank: int) -> TerminationWatch | None:
    """The worker's TerminationWatch, which leaves the notice in the run's channel, when
    something acts on it: checkpoints (a final save) or torchft (the group leaves); else
    None (Ray's own handler stays: the worker ends, and the run with it)."""
    if not (cfg.checkpoint.active or cfg.ft.enabled):
        return None

    def tell(at: float) -> None:
        channel.call("terminating", rank, at, timeout_s=10)

    return TerminationWatch(on_term=tell).start()
