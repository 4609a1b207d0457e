"""Worker process loops: producers (fetch + stages); collators in `driver.data.collator`;
the feeder runs in the training process (`driver.data.feeder`).

Started by `driver.data.pipeline.DataPipeline`; not meant to be run on their own. Each loop
reports what it is working on in a shared status row (sample index, step, start time) so
the training process can name the stage and sample when a worker crashes or hangs.
"""

from __future__ import annotations

import ctypes
import gc
import os
import queue
import signal
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from driver.data.heap import keep_freed_memory
from driver.data.placement import Placer
from driver.data.sampling import sample_seed
from driver.data.stages import SampleContext, WorkerInfo
from driver.data.staging import FAILED, OK, outbound, stage_out, unsendable

__all__ = ["FAILED", "OK"]  # the states of a sample, also read from here
_WAIT = 0.5


@dataclass
class Shared:
    """Everything the workers of one pipeline share (inherited on fork, pickled on spawn)."""

    config: Any
    rank: int
    world_size: int
    dataset_len: int
    work_q: Any
    sample_qs: list[Any]
    ready_q: Any
    stop: Any
    status: Any  # flat double array: 3 per worker (index or step, step, started)
    shm: Any
    parent_pid: int
    layout_lock: Any = None  # guards the agreed signature of direct placement
    place: bool = False  # producers place samples into batch slots (default collation)


class Stopped(Exception):
    """The pipeline is shutting down."""


def prepare_worker(shared: Shared, row: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # die with the training process even if it is killed with SIGKILL
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass
    keep_freed_memory()  # reuse freed sample memory instead of faulting it in again
    gc.freeze()  # never walk (and so never copy) the objects inherited from the parent
    set_status(shared, row, -1, -1)
    shared.ready_q.put(["ready", row])


def set_status(shared: Shared, row: int, what: int, step: int) -> None:
    # `what` (read first by the watchdog) is written last when work starts, first when it
    # ends, so a reader never pairs a new sample with the previous sample's start time.
    if what < 0:
        shared.status[3 * row] = what
    shared.status[3 * row + 2] = time.time()
    shared.status[3 * row + 1] = step
    shared.status[3 * row] = what


def _alive(shared: Shared) -> bool:
    return not shared.stop.is_set() and os.getppid() == shared.parent_pid


def get_item(shared: Shared, q: Any) -> tuple[Any, list]:
    """The next record of `q`, (head, values); Stopped when the pipeline is shutting down."""
    while True:
        try:
            return q.get(timeout=_WAIT)
        except queue.Empty:
            if not _alive(shared):
                raise Stopped from None


def put_item(shared: Shared, q: Any, head: Any, values: list | None = None) -> None:
    while True:
        try:
            return q.put(head, values, timeout=_WAIT)
        except queue.Full:
            if not _alive(shared):
                raise Stopped from None


def producer_main(shared: Shared, row: int, wid: int, dataset: Any, stages: list) -> None:
    """Fetch samples by index, run the stages, hand the result to the step's collator."""
    prepare_worker(shared, row)
    worker = WorkerInfo("producer", wid, shared.rank)
    clients = [stage.client(worker) for stage in stages]
    placer = Placer(shared)
    threads = shared.config.fetch_threads
    pool = ThreadPoolExecutor(threads, thread_name_prefix="fetch") if threads > 1 else None
    try:
        while True:
            (epoch, step, slot, count, first, indices), _ = get_item(shared, shared.work_q)
            job = (dataset, clients, stages, epoch, slot, count, placer)
            results = _run_task(shared, row, pool, job, step, list(enumerate(indices, first)))
            set_status(shared, row, -1, -1)
            records, values = outbound(results)
            out = shared.sample_qs[step % len(shared.sample_qs)]
            try:
                put_item(shared, out, [epoch, step, slot, count, records], values)
            except TypeError:  # a sample that is not plain data: reported, not sent
                records, values = unsendable(records, values)
                put_item(shared, out, [epoch, step, slot, count, records], values)
    except Stopped:
        return
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        for client in clients:
            client.close()


def _run_task(shared: Shared, row: int, pool: Any, job: tuple, step: int, todo: list) -> list:
    """(pos, index, state, value) per sample in order; the status names the oldest unfinished."""
    seed, rank = shared.config.seed, shared.rank
    dataset, clients, stages, epoch, slot, count, placer = job

    def one(pos: int, index: int) -> tuple:
        ctx = SampleContext(index, epoch, sample_seed(seed, epoch, index), rank)
        state, value = _one(dataset, clients, stages, index, ctx)
        if state == OK:
            value = placer.place(slot, pos, count, value) or stage_out(shared, slot, pos, value)
        return pos, index, state, value

    futures = [pool.submit(one, *item) for item in todo] if pool is not None else None
    out = []
    for k, (pos, index) in enumerate(todo):
        set_status(shared, row, index, step)
        out.append(futures[k].result() if futures else one(pos, index))
    return out


def _one(dataset: Any, clients: list, stages: list, index: int, ctx: SampleContext) -> tuple:
    where = "fetch"
    try:
        sample = dataset[index]
        for client, stage in zip(clients, stages, strict=True):
            where = f"stage {stage.name}"
            sample = client.process(sample, ctx)
        return OK, sample
    except Exception as err:  # a corrupt sample: reported by index, the policy decides
        return FAILED, f"{where}: {type(err).__name__}: {err}"


def run_safely(target: Any, *args: Any) -> None:
    """Process entry: run a loop; an unexpected error is printed and exits non-zero."""
    try:
        target(*args)
    except BaseException:
        traceback.print_exc()
        os._exit(70)
