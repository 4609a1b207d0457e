"""The processes, queues and shared memory of one running pipeline, and their release.

`Runtime.start` creates a shared-memory arena (batch slots, then as many staging slots, see
`driver.data.staging`) and starts the producers and collators (the feeder is part of the
training process: `driver.data.feeder`); once every one reports ready, `release_arena`
unlinks the arena from /dev/shm (the processes keep their mappings), so from then on no
exit path, even SIGKILL, can leak it.
`Runtime.shutdown` stops and reaps every process; it is idempotent and also runs when the
pipeline is garbage-collected or the interpreter exits.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import time
import uuid
from multiprocessing import shared_memory
from typing import Any

from driver.data import collator, workers
from driver.data.errors import PipelineError, StageCrashed, StageHung
from driver.data.frames import FrameQueue
from driver.data.placement import arena_bytes
from driver.data.stages import default_collate

SHM_PREFIX = "reve-data-"
_counter = itertools.count()


class Runtime:
    """Live resources of one pipeline (no reference back to the pipeline object)."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, Any]] = []  # (label, process) in status-row order
        self.queues: list[Any] = []
        self.shm: shared_memory.SharedMemory | None = None
        self.shared: workers.Shared | None = None
        self.unlinked = False

    def start(self, cfg: Any, rank: int, world_size: int, dataset: Any, stages: list,
              collate_fn: Any) -> None:  # fmt: skip
        ctx = mp.get_context(cfg.start_method)
        name = f"{SHM_PREFIX}{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        self.shm = shared_memory.SharedMemory(name, create=True, size=arena_bytes(cfg))
        work_q = FrameQueue(ctx, cfg.work_queue_size)  # typed frames between the processes
        sample_qs = [FrameQueue(ctx, cfg.sample_queue_size) for _ in range(cfg.collators)]
        ready_q = FrameQueue(ctx)
        self.queues = [work_q, *sample_qs, ready_q]
        rows = cfg.producers + cfg.collators
        self.shared = workers.Shared(
            cfg, rank, world_size, len(dataset), work_q, sample_qs, ready_q,
            ctx.Event(), ctx.RawArray("d", 3 * rows), self.shm, os.getpid(),
            layout_lock=ctx.Lock(), place=collate_fn is default_collate,
        )  # fmt: skip
        for row in range(rows):  # idle until the worker reports otherwise
            self.shared.status[3 * row : 3 * row + 3] = [-1.0, -1.0, time.time()]
        plan = [(f"producer-{i}", workers.producer_main, (i, dataset, stages))
                 for i in range(cfg.producers)]  # fmt: skip
        plan += [(f"collator-{i}", collator.collator_main, (i, collate_fn))
                 for i in range(cfg.collators)]  # fmt: skip
        for row, (label, target, args) in enumerate(plan):
            proc = ctx.Process(
                target=workers.run_safely, args=(target, self.shared, row, *args),
                name=f"data-{label}-rank{rank}", daemon=True,
            )  # fmt: skip
            proc.start()
            self.procs.append((label, proc))

    def release_arena(self) -> None:
        """Unlink the arena once every process holds its mapping."""
        if self.shm is not None and not self.unlinked:
            self.unlinked = True
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass

    def dead(self) -> list[tuple[int, str, Any]]:
        """(row, label, process) of every process that has exited."""
        return [
            (row, label, p) for row, (label, p) in enumerate(self.procs) if p.exitcode is not None
        ]

    def status(self, row: int) -> tuple[int, int, float]:
        """What worker `row` is on: (sample index or step, step or epoch, since when)."""
        values = self.shared.status[3 * row : 3 * row + 3]
        return int(values[0]), int(values[1]), float(values[2])

    def shutdown(self) -> None:
        if self.shared is not None:
            self.shared.stop.set()
        for _, proc in self.procs:
            if proc.exitcode is None:
                proc.terminate()
        deadline = time.monotonic() + 5.0
        for _, proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.exitcode is None:
                proc.kill()
                proc.join(1.0)
        self.procs = []
        for q in self.queues:
            q.cancel_join_thread()
            q.close()
        self.queues = []
        self.release_arena()
        if self.shm is not None:
            try:
                self.shm.close()
            except BufferError:  # batches still referenced: the mapping goes with the last one
                self.shm._buf = self.shm._mmap = None
            self.shm = None


def describe(runtime: Runtime) -> str:
    """One line per worker: what it is doing now (for timeout errors)."""
    lines = []
    now = time.time()
    for row, (label, proc) in enumerate(runtime.procs):
        what, step, since = runtime.status(row)
        state = "exited" if proc.exitcode is not None else "alive"
        if label.startswith("producer"):
            doing = f"on sample {what} (step {step})" if what >= 0 else "idle"
        else:
            doing = f"collating step {what}" if what >= 0 else "idle"
        lines.append(f"{label} (pid {proc.pid}, {state}): {doing} for {now - since:.1f}s")
    return "; ".join(lines)


def check_ready(runtime: Runtime, ready: set[int], deadline: float, cfg: Any, rank: int) -> None:
    """Fail if a worker died (naming what it was doing) or did not report ready in time."""
    watchdog(runtime, cfg, rank)
    if time.monotonic() > deadline:
        missing = [label for row, (label, _) in enumerate(runtime.procs) if row not in ready]
        raise PipelineError(
            f"data workers {missing} not ready within PipelineConfig.startup_timeout_s="
            f"{cfg.startup_timeout_s}"
        )


def watchdog(runtime: Runtime, cfg: Any, rank: int) -> None:
    """Raise if a worker exited, or a producer/collator exceeded its per-item timeout."""
    for row, label, proc in runtime.dead():
        what, step, _ = runtime.status(row)
        raise StageCrashed(
            f"data {label} (pid {proc.pid}) of rank {rank} exited with code "
            f"{proc.exitcode} {_doing(label, what, step)}"
        )
    now = time.time()
    for row, (label, _) in enumerate(runtime.procs):
        what, step, since = runtime.status(row)
        producer = label.startswith("producer")
        limit = cfg.sample_timeout_s if producer else cfg.collate_timeout_s
        if what >= 0 and now - since > limit:
            field = "sample_timeout_s" if producer else "collate_timeout_s"
            raise StageHung(
                f"data {label} of rank {rank} hung {_doing(label, what, step)}: "
                f"{now - since:.1f}s > PipelineConfig.{field}={limit}"
            )


def _doing(label: str, what: int, step: int) -> str:
    if what < 0:
        return "while idle"
    if label.startswith("producer"):
        return f"while processing sample {what} (step {step})"
    return f"while collating step {what} (epoch {step})"
