"""`DataPipeline`: one training rank's loader (feeder → producers → collators, shared memory).

The feeder is this process's part (`driver.data.feeder`): each free batch slot gets the
tasks of the next step; producers and collators are worker processes.

    cfg = PipelineConfig(batch_size=32, producers=4, seed=1)
    with DataPipeline(dataset, cfg, rank=rank, world_size=world) as data:
        data.load_state_dict(saved)          # optional: exact resume, any world size
        for batch in data:                   # one epoch; iterate again for the next
            train_step(batch)
            if checkpoint_due: saved = data.state_dict()

Batches are views on a shared-memory slot; the slot is reused once the batch (every tensor
taken from it) is no longer referenced, so holding more than `prefetch_batches - 1` batches
alive stalls the pipeline (it then fails with a clear error instead of hanging).
"""

from __future__ import annotations

import gc
import logging
import queue
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.config.data import PipelineConfig
from driver.data import codec
from driver.data.datasets import as_map_dataset
from driver.data.errors import CorruptSample, PipelineError
from driver.data.feeder import Feeder
from driver.data.resume import Checkpointable
from driver.data.runtime import Runtime, check_ready, describe, watchdog
from driver.data.sampling import steps_in_epoch
from driver.data.stages import Stage, as_stages, default_collate

log = logging.getLogger(__name__)


class DataPipeline(Checkpointable):
    """Iterator of batches for one rank; a context manager; checkpointable."""

    def __init__(
        self,
        dataset: Any,
        config: PipelineConfig | None = None,
        rank: int = 0,
        world_size: int = 1,
        collate_fn: Callable[[list[Any]], Any] = default_collate,
        stages: Sequence[Stage | Callable[..., Any]] | None = None,
    ):
        self.config = config or PipelineConfig()
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world size {world_size}")
        self.dataset = as_map_dataset(dataset, pack=self.config.pack_in_memory)
        self.rank, self.world_size = rank, world_size
        self.collate_fn, self.stages = collate_fn, as_stages(stages)
        self.epoch, self.origin, self.consumed = 0, 0, 0
        self.skipped: list[tuple[int, int, str]] = []  # (epoch, index, reason)
        self.last_indices: list[int] = []  # sample indices of the batch returned last
        self._runtime: Runtime | None = None
        self._finalizer: weakref.finalize | None = None
        self._buffer: dict[tuple[int, int], tuple] = {}
        self._released: deque[int] = deque()
        self._leased: set[int] = set()
        self._leases: dict[int, tuple[weakref.ref, int]] = {}  # id(ref to a batch) → slot
        self._dropped: deque[weakref.ref] = deque()  # batches no longer referenced
        self._feeder: Feeder | None = None
        self._free: deque[int] = deque()  # batch slots with no step yet
        self._backlog: deque[list] = deque()  # tasks not queued yet (the queue was full)
        self._fed = (-1, -1)  # (epoch, step) queued last

    # -- iteration ---------------------------------------------------------------------
    def steps_left(self) -> int:
        """Batches this rank still gets in the current epoch."""
        cfg = self.config
        total = steps_in_epoch(
            len(self.dataset), cfg.batch_size, self.world_size, self.origin, cfg.drop_last
        )
        return total - self.consumed

    def __iter__(self) -> DataPipeline:
        return self

    def __next__(self) -> Any:
        while True:
            if self.steps_left() <= 0:
                self.epoch, self.origin, self.consumed = self.epoch + 1, 0, 0
                raise StopIteration
            try:
                batch = self._next_batch()
            except BaseException:
                self.close()
                raise
            if batch is not _EMPTY:
                return batch

    def _next_batch(self) -> Any:
        if self._runtime is None:
            self._start()
        key = (self.epoch, self.consumed)
        waited_since = time.monotonic()
        self._recycle()  # also when the batch is here: the freed slots get their next steps
        while key not in self._buffer:
            if not self._receive():
                self._check(key, waited_since)
        message = self._buffer.pop(key)
        if message[0] == "collate_error":
            _, epoch, step, _, indices, reason, _ = message
            raise PipelineError(
                f"data collator failed on step {step} of epoch {epoch} (samples {indices[:8]}): "
                f"{reason}"
            )
        self._report_skipped(*key, message[5])  # when consumed: prefetched batches of the
        self.consumed += 1  # next epoch are not reported (or counted in state_dict) early
        return self._unpack(message)

    def _receive(self) -> bool:
        wait = min(0.01, self.config.poll_interval_s) if self._backlog else None
        try:
            head, values = self._runtime.shared.ready_q.get(
                timeout=wait or self.config.poll_interval_s
            )
        except queue.Empty:
            return False
        finally:
            self._recycle()
        self._handle(head, values)
        return True

    def _handle(self, head: list, values: list) -> None:
        """Buffer a worker message: a batch, or a collator's failure, is acted on when the loop
        takes its step (its skipped samples reported, the failure raised), so the failure a
        run reports is its first step's, whichever collator finished first."""
        kind, message = head[0], (*head, values[0] if values else None)
        if kind in ("batch", "collate_error"):
            _, epoch, step = message[:3]
            self._buffer[(epoch, step)] = message

    def _report_skipped(self, epoch: int, step: int, skipped: list[tuple[int, str]]) -> None:
        for index, reason in skipped:
            where = f"sample {index} (epoch {epoch}, step {step}, rank {self.rank})"
            if self.config.on_corrupt == "fail":
                raise CorruptSample(f"corrupt data {where}: {reason}", index)
            log.warning("skipping corrupt %s: %s", where, reason)
            self.skipped.append((epoch, index, reason))
        if len(self.skipped) > self.config.max_skipped:
            raise PipelineError(
                f"{len(self.skipped)} corrupt samples skipped, more than "
                f"PipelineConfig.max_skipped={self.config.max_skipped}"
            )

    def _unpack(self, message: tuple) -> Any:
        _, epoch, step, slot, indices, _, spec = message
        self.last_indices = list(indices)
        if spec is None:  # every sample of the step was skipped
            self._released.append(slot)
            return _EMPTY
        size = self.config.slot_bytes
        base = np.frombuffer(self._runtime.shm.buf, np.uint8, count=size, offset=slot * size)
        self._leased.add(slot)
        # The callback is a builtin, so dropping a batch runs no Python code: a Ctrl-C
        # whose KeyboardInterrupt were raised inside a weakref callback would be lost.
        ref = weakref.ref(base, self._dropped.append)
        self._leases[id(ref)] = (ref, slot)
        return codec.decode(codec.spec_in(spec), base, to_torch=self.config.output == "torch")

    def _recycle(self) -> None:
        while self._dropped:
            self._released.append(self._leases.pop(id(self._dropped.popleft()))[1])
        while self._released:
            slot = self._released.popleft()
            self._leased.discard(slot)
            self._free.append(slot)
        self._feed()

    def _feed(self) -> None:
        """Queue the tasks of the next steps into the free slots, as far as the work queue
        takes them now (the rest waits in the backlog: the training process never blocks
        on a queue its workers may have stopped reading)."""
        work_q = self._runtime.shared.work_q
        while True:
            while self._backlog:
                if not work_q.try_put(self._backlog[0]):
                    return
                self._backlog.popleft()
            step = self._feeder.next_step() if self._free else None
            if step is None:  # no free slot, or an empty epoch: nothing more will come
                return
            self._fed = step[:2]
            self._backlog.extend(self._feeder.tasks(step, self._free.popleft()))

    # -- liveness -----------------------------------------------------------------------
    def _check(self, key: tuple[int, int], waited_since: float) -> None:
        runtime, cfg = self._runtime, self.config
        watchdog(runtime, cfg, self.rank)
        if len(self._leased) >= cfg.prefetch_batches:
            gc.collect()
            self._recycle()
            if len(self._leased) >= cfg.prefetch_batches:
                raise PipelineError(
                    f"all {cfg.prefetch_batches} batch slots are held by batches the training "
                    "loop still references; drop or copy old batches, or raise "
                    "PipelineConfig.prefetch_batches"
                )
        if time.monotonic() - waited_since > cfg.batch_timeout_s:
            raise PipelineError(
                f"no batch for step {key[1]} of epoch {key[0]} within "
                f"PipelineConfig.batch_timeout_s={cfg.batch_timeout_s}: feeder (this process):"
                f" last queued step {self._fed[1]} of epoch {self._fed[0]}, "
                f"{len(self._backlog)} tasks waiting; {describe(runtime)}"
            )

    # -- lifecycle ----------------------------------------------------------------------
    def _start(self) -> None:
        runtime = Runtime()
        self._runtime = runtime
        self._finalizer = weakref.finalize(self, runtime.shutdown)
        self._buffer, self._released, self._leased = {}, deque(), set()
        self._leases, self._dropped = {}, deque()
        runtime.start(self.config, self.rank, self.world_size, self.dataset, self.stages,
                      self.collate_fn)  # fmt: skip
        cfg = self.config
        self._feeder = Feeder(cfg, self.rank, self.world_size, len(self.dataset), self.epoch,
                              self.origin)  # fmt: skip
        self._free, self._backlog = deque(range(cfg.prefetch_batches)), deque()
        self._feed()
        ready: set[int] = set()
        deadline = time.monotonic() + self.config.startup_timeout_s
        while len(ready) < len(runtime.procs):
            try:
                head, values = runtime.shared.ready_q.get(timeout=self.config.poll_interval_s)
            except queue.Empty:
                check_ready(runtime, ready, deadline, self.config, self.rank)
                head, values = ["waiting"], []
            if head[0] == "ready":
                ready.add(head[1])
            elif head[0] != "waiting":  # workers run as soon as they start: a batch or an
                self._handle(head, values)  # error can come first
            self._feed()
        runtime.release_arena()

    def close(self) -> None:
        """Stop every worker process and release the shared memory (idempotent)."""
        if self._finalizer is not None:
            self._finalizer()
        self._runtime, self._finalizer = None, None

    def __enter__(self) -> DataPipeline:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_EMPTY = object()
