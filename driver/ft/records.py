"""Every committed step keeps its metrics row of record under torchft, even when the rank
that writes it dies.

The writer of a step (`driver.parallel.Topology.is_writer`: the lowest rank of the lowest
live group) sends the step's full row; its reporter batches rows for up to a second
(driver.metrics.rank), so a SIGKILLed writer takes its unsent rows with it, and a writer
that dies inside a step after its share of the allreduce went through never sends the row
of a step the others commit. Every live group computes the same record fields (loss, lr,
grad norm, the run's ft counters), so the other groups keep their recent rows and send
them as copies (`COPY`) when the writer may be gone:

- hand-over: a group that becomes the writer (its quorum no longer has the old writer's
  group at position 0) sends its rows of the steps another group wrote since it last
  wrote (`Copies.after_step`);
- end of run: the writer of the last step marks `RECORDED_KEY` in the start gate's store
  once its rows reached the driver; the next group in line (position 1) waits for the
  mark and, if it does not come within `END_WAIT_S`, sends its copies (`Copies.pending`)
  and the run's final figures.

The driver keeps the first row of record of each step and only that one
(driver.metrics.records), so copies of rows that did arrive cost a few bytes and nothing
else.

    copies = Copies()
    for row, wrote in committed_steps:
        for copy in copies.after_step(row, wrote):
            reporter.add(copy, full=True)      # before this step's own row
        reporter.add(row, full=wrote)
"""

from __future__ import annotations

import time
from collections import deque

from driver.metrics.rank import COPY

KEEP = 256
"""Rows a group keeps of steps another group wrote: far more than the writer's reporter
holds unsent (one second of steps)."""
RECORDED_KEY = "ft/recorded"
END_WAIT_S = 10.0
"""How long the next group in line waits for the last writer's mark (its flush waits at
most this long for the driver's acknowledgement)."""


class Copies:
    """One group's recent rows of steps another group wrote, sent as copies when the
    writer may have lost them."""

    def __init__(self, keep: int = KEEP):
        self.kept: deque[dict] = deque(maxlen=keep)

    def after_step(self, row: dict, wrote: bool) -> list[dict]:
        """After a committed step: the copies to send before the step's own row (this group
        just became the writer: the rows it kept), or none."""
        if not wrote:
            self.kept.append(dict(row))
            return []
        return self.pending()

    def pending(self) -> list[dict]:
        """The kept rows as copies, oldest first; forgets them."""
        out = [{**row, COPY: True} for row in self.kept]
        self.kept.clear()
        return out


def mark_recorded(store, step: int) -> None:
    """The last writer's rows reached the driver (its reporter flushed)."""
    if store is not None:
        store.set(RECORDED_KEY, str(step))


def wait_recorded(store, step: int, timeout_s: float = END_WAIT_S, poll_s: float = 0.05) -> bool:
    """Whether the writer of `step` marked its rows delivered within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        if store.check([RECORDED_KEY]) and int(store.get(RECORDED_KEY)) >= step:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
