"""A Ray node that is draining, as a termination notice for each rank on it.

On Kubernetes a worker pod's SIGTERM (a spot reclaim, an eviction, a Kueue preemption) goes
to the pod's main process, `ray start --block`. Ray 2.60 then asks the GCS to drain the node
(reason: preemption, with a deadline `RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S` ahead) and stops
the raylet at the deadline, which kills its workers without a signal they could act on
(ray/_private/node.py). So the driver watches: `DrainWatcher` asks the GCS for the draining
nodes every `every_s` and leaves `terminating` for every rank whose newest start was on one
(each rank's `hello` carries its Ray node id), as if the rank had heard its own SIGTERM
(driver.trainer.signals): under ft its replica group leaves the quorum after the step in
flight; without ft the run commits a final checkpoint (driver.checkpoint.preemption).

    drains = watch_drains(channel)    # driver.launch, beside the run's channel
    ...
    drains.close()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger("driver.channel")

POLL_S = 1.0
"""How often the driver asks the GCS (one small RPC): a notice is at most this late."""


class DrainWatcher:
    """A thread that turns draining Ray nodes into termination notices in the run's channel
    (`channel`: its `ranks_on` and `terminating`, under the channel's lock)."""

    def __init__(self, channel, read: Callable[[], Iterable[str]], every_s: float = POLL_S):
        self.channel, self.read, self.every_s = channel, read, every_s
        self.failures = 0
        self.noticed: set[int] = set()
        """Ranks told so far (once per start: the channel keeps the first notice)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drain-watch", daemon=True)

    def start(self) -> DrainWatcher:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.poll()

    def poll(self) -> list[int]:
        """One look: the ranks on a draining node, each told it is ending; never raises
        (the GCS unreachable for a moment: the next look tries again)."""
        try:
            nodes = {str(node) for node in self.read()}
        except Exception as exc:  # an RPC error of any kind
            self.failures += 1
            if self.failures == 1:
                log.warning("drain watch: cannot read the draining Ray nodes (%s); trying "
                            "again every %g s", exc, self.every_s)  # fmt: skip
            return []
        if not nodes:
            return []
        ranks = self.channel.ranks_on(sorted(nodes))
        now = time.time()
        for rank in ranks:
            self.channel.terminating(rank, now)
        if set(ranks) - self.noticed:
            log.warning("ray node draining (its pod is being terminated): ranks %s end after "
                        "the step in flight", ranks)  # fmt: skip
        self.noticed.update(ranks)
        return ranks


def gcs_draining() -> Callable[[], Iterable[str]]:
    """The draining nodes' ids (hex) from the GCS of the Ray this process is connected to."""
    import ray
    from ray._raylet import GcsClient

    gcs = GcsClient(address=ray.get_runtime_context().gcs_address)
    return lambda: gcs.get_draining_nodes(timeout=5)


def watch_drains(channel, every_s: float = POLL_S) -> DrainWatcher:
    """A started DrainWatcher on the connected Ray's GCS (without a GCS client, one that
    says so once and watches nothing: a run never fails for want of this watch)."""
    try:
        read = gcs_draining()
    except Exception as exc:  # noqa: BLE001 (whatever Ray raises, the run goes on)
        log.warning("drain watch: no GCS client (%s); draining nodes go unnoticed", exc)
        read = tuple
    return DrainWatcher(channel, read, every_s).start()
