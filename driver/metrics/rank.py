"""What each training rank reports: its step rows, batched to the run's channel.

    reporter = RankReporter(sink, rank, attempt, device)
    reporter.add(row)        # after every step: tags, memory; a thread sends every 1 s
    reporter.flush()         # at the end and when the attempt fails: waits for the driver

Every rank sends `names.PER_RANK_KEYS` (step time, data wait, forward/backward and
optimizer time, throughput, memory); the writer rank sends its whole row (loss, lr,
checkpoint, ft and auxiliary-service fields too): rank 0, or under torchft the lowest rank of
the lowest live replica group (`driver.parallel.Topology.is_writer`; `add(row, full=...)`),
so while rank 0's group is lost another group's rows carry the loss. Rows are tagged with
`rank` and `attempt`. The full row is the step's row of record (one per committed step);
`of_record` tells it from the per-rank rows, for metrics.jsonl and the progress display.
Sending is one fire-and-forget message per batch (`sink.send("push_many", rows)`, a
driver.channel client) from a small thread, so a step never waits on the driver, and a
rank stuck in a collective (a peer failed) still sends its last rows; `flush` waits
(bounded) for the driver's answer to a `sync` sent after them, so the last rows of a failing
rank reach the driver before it re-raises. A rank whose peer failed is torn down by Ray
Train; just before, `leave_all` sends what it has not sent yet the same way
(driver.metrics.teardown: Ray Train's worker shutdown hook), so its last rows are kept
even when its sending thread has not had its turn (a loaded machine).
Memory: RSS from /proc/self/statm (one small read), CUDA's peak allocation from the
caching allocator's counters (no device sync); sampled at most once per `MEMORY_EVERY_S`
(a step's row carries the newest sample), so a fast step does not pay a file read.
The sending thread sleeps until the batch is due (`next_wake`), not on a short tick: a
thread that wakes takes the interpreter lock from the training thread.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import weakref

from driver.metrics.names import PER_RANK_KEYS

PUSH_EVERY_S = 1.0
"""Each rank's batch interval: one message per second per rank (both the rank and the driver
spend CPU on each, which a small machine's training workers feel)."""
IDLE_S = 0.2
DURABLE_S = 30.0
_LIVE: weakref.WeakSet = weakref.WeakSet()
"""This process's reporters not flushed yet (`leave_all`)."""
"""The longest a commit waits for its steps' rows to be written by the driver."""
MEMORY_EVERY_S = 1.0
"""The oldest memory sample a row may carry."""
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int | None:
    """This process's resident memory (Linux; None elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def memory(device) -> dict:
    """The memory fields of a row."""
    out = {}
    rss = rss_bytes()
    if rss is not None:
        out["rss_bytes"] = rss
    if device is not None and getattr(device, "type", "") == "cuda":
        import torch

        out["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    return out


class MemorySampler:
    """`memory(device)`, taken again only when the last sample is `every_s` old."""

    def __init__(self, device, every_s: float = MEMORY_EVERY_S):
        self.device, self.every_s = device, every_s
        self.taken, self.fields = float("-inf"), {}

    def __call__(self) -> dict:
        now = time.monotonic()
        if now - self.taken >= self.every_s:
            self.taken, self.fields = now, memory(self.device)
        return self.fields


def next_wake(now: float, pending: bool, pushed: float, added: float,
              every_s: float, idle_s: float) -> float:  # fmt: skip
    """Seconds the sending thread sleeps: until the batch is due (`every_s` after the last
    push, or `idle_s` after the newest row), or `idle_s` when nothing waits to be sent
    (a row added meanwhile is then sent at most `idle_s` late)."""
    if not pending:
        return idle_s
    return max(0.0, min(pushed + every_s, added + idle_s) - now)


def rank_row(row: dict, rank: int, attempt: int, full: bool | None = None) -> dict:
    """The row a rank sends: the whole row from the writer (`full`; None: rank 0, the
    writer while every replica group is live), the per-rank fields from the others."""
    full = rank == 0 if full is None else full
    if full:
        out = dict(row)
    else:
        out = {k: v for k, v in row.items() if k in PER_RANK_KEYS}
        out.update(step=row["step"], time=row["time"])
    out.update(rank=rank, attempt=attempt)
    return out


COPY = "copy"
"""Set on a full row that another rank sent in case the step's writer lost its own (under
torchft, driver.ft.records); the driver keeps it as the row of record only when the step
has none (driver.metrics.records clears the flag)."""


def of_record(row: dict) -> bool:
    """Whether a drained row is its step's row of record: the writer's full row, the only
    one with the loss (`names.PER_RANK_KEYS` leaves it out of the others), and not a copy."""
    return "loss" in row and not row.get(COPY)


def records_in_order(rows: list[dict]) -> list[dict]:
    """A drained batch's rows of record in the order their steps were trained (their
    `time`): rows from two connections (an old and a new torchft writer) may be handled out
    of order within one drain. Sort after `RecordBook.admit`, which goes by arrival."""
    return sorted((row for row in rows if of_record(row)), key=lambda row: row.get("time", 0.0))


class RankReporter:
    """Batches one rank's rows to the run's channel (see the module docstring). A small thread sends
    them: every `every_s`, or `idle_s` after the newest row when no other follows (a slow
    step, or a rank blocked in a collective because a peer failed: its rows still leave
    before the worker group is torn down)."""

    def __init__(self, sink, rank: int, attempt: int, device=None,
                 every_s: float = PUSH_EVERY_S, idle_s: float = IDLE_S):  # fmt: skip
        self.sink, self.rank, self.attempt, self.device = sink, rank, attempt, device
        self.memory = MemorySampler(device)
        self.every_s, self.idle_s = every_s, idle_s
        self.pending: list[dict] = []
        self.pushed = self.added = time.monotonic()
        self.polled = -math.inf  # the first step's row carries the services' figures
        self.newest = 0  # the newest step whose row was added
        self._lock = threading.Lock()
        self._added = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-push", daemon=True)
        self._thread.start()
        _LIVE.add(self)

    def due(self) -> bool:
        """True at the first call, then once per `every_s` (rank 0 then adds the aux services'
        figures to the row: a run shorter than `every_s` still reports them once).
        Its own clock: the sending thread pushes the moment a batch is due, so the time of
        the last push is almost never seen `every_s` old."""
        now = time.monotonic()
        if now - self.polled < self.every_s:
            return False
        self.polled = now
        return True

    def add(self, row: dict, full: bool | None = None) -> None:
        """Queue a step's row; `full`: whether this rank writes the step's row of record
        (None: rank 0)."""
        row = rank_row(row, self.rank, self.attempt, full)
        row.update(self.memory())
        with self._lock:
            self.pending.append(row)
            self.added = time.monotonic()
            self.newest = max(self.newest, int(row["step"]))
            self._added.notify_all()

    def _run(self) -> None:
        wait = self.idle_s
        while not self._stop.wait(wait):
            with self._lock:
                if self._wait() <= 0:
                    self._push()
                wait = max(0.01, self._wait())

    def _wait(self) -> float:
        return next_wake(time.monotonic(), bool(self.pending), self.pushed, self.added,
                         self.every_s, self.idle_s)  # fmt: skip

    def _push(self) -> None:
        if self.pending:
            with contextlib.suppress(Exception):  # a closed channel: the rows are lost
                self.sink.send("push_many", self.pending)
        self.pending, self.pushed = [], time.monotonic()

    def send_now(self) -> None:
        """Send the pending rows at once, not at the next batch (a torchft writer handing
        the rows of record back to a lower group: driver.ft.stepper.after_quorum)."""
        with self._lock:
            self._push()

    def durable(self, step: int, timeout_s: float = DURABLE_S) -> None:
        """Return once the driver has written this rank's rows through `step` (the row of
        `step` may still be on its way from the training thread: an async save commits
        while the step's hooks run). Raises TimeoutError, or ChannelError when the driver
        refuses or does not answer: the commit is then refused, never made ahead of its rows."""
        deadline = time.monotonic() + timeout_s
        with self._added:
            while self.newest < step:
                if not self._added.wait(deadline - time.monotonic()):
                    raise TimeoutError(f"the row of step {step} was not reported in {timeout_s:g}s")
            self._push()
        left = max(0.1, deadline - time.monotonic())
        if not self.sink.call("persist", timeout_s=left):
            raise RuntimeError("the driver no longer writes rows (it is closing)")

    def flush(self, timeout_s: float = 10.0) -> None:
        """Stop the thread, send what is pending and wait until the driver has it (never
        raises)."""
        _LIVE.discard(self)
        self._stop.set()
        self._thread.join()
        self.leave(timeout_s)

    def leave(self, timeout_s: float) -> None:
        """Send what is pending now and wait (bounded) until the driver has it; never
        raises. From any thread: the training thread may be blocked in a collective."""
        with self._lock:
            self._push()
        with contextlib.suppress(Exception):
            self.sink.call("sync", timeout_s=timeout_s)


def leave_all(timeout_s: float) -> None:
    """`leave` for every reporter of this process not flushed yet (its worker is about to
    be torn down)."""
    for reporter in list(_LIVE):
        reporter.leave(timeout_s)
