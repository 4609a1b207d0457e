"""The Checkpointer: staged async DCP saves with commit markers, retention and resume.

    ckpt = Checkpointer(cfg, team="research", run="tiny-lm", rank=rank, world_size=ws)
    ref = ckpt.resume(state)                 # newest committed (or cfg.resume URI), or None
    for step in range(start, steps + 1):
        train_step(...)
        if ckpt.due(step):
            ckpt.save(step, state)           # returns once the state is in host memory
    ckpt.close()                             # waits for the last write

Each rank writes its own shard; the DCP save's closing all-reduce tells rank 0 that every shard and
the metadata are durable, and rank 0 then writes the commit marker, applies the retention policy
and calls the checkpoint callbacks. The marker is signed with the run's checkpoint key; only
authentic checkpoints are resumed from (auth.py). Under torchft only the lowest live replica group
writes (`set_writer`; each group its own process group). Within one process group, `dp_replica` is
the rank's data-parallel replica (rank // shard size under DDP or HSDP): only the ranks of replica
0 snapshot and write the model and optimizer state; the others add just their own RNG states and
data-loader progress (`driver.parallel.Topology.replica_of`).
"""

from __future__ import annotations

import logging
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from driver.checkpoint.api import CheckpointCallback, new_counters
from driver.checkpoint.auth import load_secret, marker_problem
from driver.checkpoint.commit import Committing, failures
from driver.checkpoint.groups import training_cpu_group
from driver.checkpoint.layout import run_uri, save_due, step_dir
from driver.checkpoint.loading import Loading
from driver.checkpoint.state import TrainState, save_dict
from driver.checkpoint.storage import Storage, make_writer
from driver.config.checkpoint import CheckpointConfig

if TYPE_CHECKING:  # DCP itself loads at the first save (commit.failures says why)
    from collections.abc import Callable

    from torch.distributed.checkpoint.staging import DefaultStager

log = logging.getLogger("driver.checkpoint")
# Single-process runs save/load without a process group on purpose.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable")


class Checkpointer(Committing, Loading):
    """Saves and loads the training state of one rank."""

    def __init__(
        self,
        config: CheckpointConfig,
        team: str,
        run: str,
        rank: int = 0,
        world_size: int = 1,
        group: dist.ProcessGroup | None = None,
        replica_group: int = 0,
        callbacks: tuple[CheckpointCallback, ...] = (),
        dp_replica: int = 0,
        secret: bytes | None = None,
    ):
        self.config = config
        self.rank = rank
        self.world_size = world_size
        self.team, self.run = team, run
        self.secret = load_secret() if secret is None else secret  # see auth.py
        self.storage = Storage(
            run_uri(config.root, team, run),
            check=lambda marker, uri: marker_problem(marker, self.secret, team, run),
        )
        self.writes = replica_group == 0 and config.enabled
        self.holds_replica = dp_replica == 0  # snapshots the model and optimizer
        self.callbacks = list(callbacks)
        self.counters = new_counters()
        self.last_error: str | None = None
        self.write_delay_s = 0.0
        """Each write waits this long first (`debug.slow_save_s`: a drill)."""
        self.before_commit: Callable[[int], None] | None = None
        """Rank 0 calls it with the step before it writes the marker; raising refuses the
        commit (the trainer sets it to its rank's RankReporter.durable: a committed step's
        row of record is already written)."""
        self._deferred: tuple | None = None
        self.write_durations: list[float] = []
        self._last_saved: int | None = None
        self._last_ok = True
        self._pending: Future | None = None
        self._staging: Future | None = None
        self._finalizer = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-commit")
        self._stager: DefaultStager | None = None
        self._distributed = dist.is_available() and dist.is_initialized() and world_size > 1
        self._owns_group = self._distributed and group is None
        # Loading runs on the training thread's CPU group; the background writer gets a
        # gloo group of its own at the first save (its collectives never interleave with
        # the training loop's). See groups.py.
        self._group = training_cpu_group() if self._owns_group else group
        self._writer = None if self._owns_group else group
        if self.writes and rank == 0:  # a destination we cannot clean is reported later
            self._call(self._clean, True)

    # ---- saving -------------------------------------------------------------------------

    def set_writer(self, writes: bool) -> None:
        """Under torchft: whether this rank's replica group writes from now on (the lowest
        live group does; `driver.ft.replica.FtReplica.lowest_live`)."""
        self.writes = writes and self.config.enabled

    def due(self, step: int) -> bool:
        """Whether the configured interval asks for a checkpoint after `step`."""
        return self.writes and save_due(step, self.config.interval_steps, self._last_saved)

    def save(self, step: int, state: TrainState, defer: bool = False) -> bool:
        """Checkpoint the state after `step`. Async mode returns once it is staged in host
        memory; the write and the commit go on in the background. Sync mode with `defer`
        writes the shards and leaves the commit to `commit_deferred()` (the trainer's, after
        the step's row is sent). False when this rank's replica group does not write."""
        if not self.writes:
            return False
        started = time.perf_counter()
        self.wait()  # the staging buffers are reused: the previous write must be done
        if step == self._last_saved and self._last_ok:
            return True  # already saved (or loaded) at this step
        uri = self.storage.uri(step_dir(step))
        self.counters["saves_started"] += 1
        self._last_saved = step
        state_dict = save_dict(state, step, self.rank, replica=self.holds_replica)
        cfg = self.config
        background = cfg.async_mode == "async"
        nice = cfg.writer_nice if background else 0
        chunk = int(cfg.write_chunk_mb * 1e6) if background else 0
        delay = {"delay_s": self.write_delay_s} if self.write_delay_s > 0 else {}
        writer = make_writer(uri, cfg.sync_files, cfg.writer_threads, nice, chunk, **delay)
        kwargs = {"storage_writer": writer, "process_group": self._writer_group()}
        kwargs["no_dist"] = not self._distributed
        if cfg.async_mode == "sync":
            import torch.distributed.checkpoint as dcp

            outcome = (step, uri, started, self._call(dcp.save, state_dict, **kwargs))
            # A failed write is reported at once (on every rank: DCP's save raises on all).
            if defer and outcome[3] is None:
                self._deferred = outcome
            else:
                self._finalize(*outcome)
        else:
            upload = self._async_save(state_dict, kwargs)
            if isinstance(upload, Future):
                self._pending = self._finalizer.submit(self._finish, step, uri, started, upload)
            else:
                self._finalize(step, uri, started, upload)
        self.counters["last_blocked_s"] = time.perf_counter() - started
        return True

    def _async_save(self, state_dict: dict, kwargs: dict) -> Future | BaseException:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

        try:
            response = dcp.async_save(state_dict, async_stager=self._get_stager(), **kwargs)
        except failures() as exc:  # staging itself failed: nothing was written
            return exc
        if isinstance(response, AsyncSaveResponse):
            if self.config.overlap_staging:
                self._staging = response.staging_completion
            else:
                response.staging_completion.result()
            return response.upload_completion
        return response

    def staged(self) -> None:
        """With `overlap_staging`: block until the last save's snapshot is in host memory.
        Call it before the optimizer step; a no-op otherwise."""
        staging, self._staging = self._staging, None
        if staging is None:
            return
        started = time.perf_counter()
        self._call(staging.result)  # a staging failure fails the write; recorded there
        self.counters["last_blocked_s"] += time.perf_counter() - started

    def _writer_group(self) -> dist.ProcessGroup | None:
        """The background writer's group, made at the first save (a collective: every rank
        saves at the same steps)."""
        if self._writer is None and self._owns_group:
            self._writer = dist.new_group(backend="gloo")
        return self._writer

    def _get_stager(self) -> DefaultStager:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        if self._stager is None:
            cuda = torch.cuda.is_available()
            pinned = cuda and self.config.pin_memory
            background = cuda or self.config.overlap_staging
            options = StagingOptions(pinned, False, background, cuda)
            self._stager = DefaultStager(options)
        return self._stager

    def _finish(self, step: int, uri: str, started: float, upload: Future) -> bool:
        error = self._call(upload.result)
        return self._finalize(step, uri, started, error)

    @property
    def writing(self) -> bool:
        """Whether a background write (or its commit) is still going on."""
        return self._pending is not None and not self._pending.done()

    def commit_deferred(self) -> None:
        """Commit a sync save made with `defer` (a collective, like every commit)."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            self._finalize(*deferred)

    def drop_deferred(self) -> None:
        """Forget a deferred commit (the loop failed: the previous checkpoint stays)."""
        self._deferred = None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the last save is written and committed; whether it succeeded
        (False too when `timeout` seconds pass first)."""
        self.commit_deferred()
        self.staged()
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result(timeout)
            except TimeoutError:
                self._pending = pending
                return False
        return self._last_ok

    def close(self, timeout: float | None = None) -> None:
        """Wait (up to `timeout` seconds) for the last write, then release the staging
        buffers and threads."""
        try:
            self.wait(timeout)
        finally:
            self._finalizer.shutdown(wait=timeout is None)
            if self._stager is not None:
                self._stager.close()
                self._stager = None

    def metrics(self) -> dict[str, float]:
        """A copy of the counters, for the loop's metrics."""
        return dict(self.counters)
