"""Checkpointing as the training driver's loop uses it, on each Ray Train worker.

    session = CheckpointSession(cfg, state, rank, world, control, heard=watch.heard)
    start = session.resume()                 # the step to start after (0: fresh)
    for step in range(start, cfg.train.steps):
        row = train_one_step(...)
        session.after_step(step + 1, row)    # periodic save + the metrics row's ckpt_* fields
        if session.should_stop(step + 1):    # a preemption notice: final save done or skipped
            break
    final = session.finish()                 # final save, wait for the writes, final metrics

A stop comes from a notice: the run's (the driver's SIGTERM or SIGINT) or a worker pod's
termination (any rank's: the whole world stops as one), polled by rank 0 through the
run's channel, or this rank's own SIGTERM (`heard`, driver.trainer.signals); the ranks
agree on the step through PreemptionGuard.

On a failure the loop calls `session.abandon()`: a checkpoint staged before the failure may
still commit (up to `checkpoint.preemption_budget_s`). After `checkpoint.max_failed_saves`
saves in a row failed, `should_stop` stops every rank after the same step (as a preemption
notice does, without the final save) and `finish()` says why in `ckpt_stopped`. A worker
of a restarted worker group (the run's channel counts the starts of each rank) resumes
from the newest committed checkpoint of the run, whatever `checkpoint.resume` says.
"""

from __future__ import annotations

import logging
import time

from driver.aux.listeners import RayListeners
from driver.channel.stops import NoticePoll
from driver.checkpoint.api import CheckpointRef, row_fields
from driver.checkpoint.checkpointer import Checkpointer
from driver.checkpoint.preemption import PreemptionGuard, first_of
from driver.checkpoint.state import TrainState
from driver.parallel import Topology

log = logging.getLogger("driver.checkpoint")


class CheckpointSession:
    """One worker's checkpointer, preemption guard and attempt number."""

    def __init__(self, cfg, state: TrainState, rank: int, world: int, control=None, heard=None):
        self.config, self.steps, self.state = cfg.checkpoint, cfg.train.steps, state
        listeners = (RayListeners(),)  # auxiliary workers' listener actors, called by rank 0
        run = cfg.run
        replica = Topology.from_config(cfg.parallelism, world).replica_of(rank)
        self.ckpt = Checkpointer(
            self.config, run.team, run.name, rank, world, callbacks=listeners, dp_replica=replica
        )
        self.ckpt.write_delay_s = float(cfg.debug.slow_save_s)
        notices = NoticePoll(control) if control is not None and rank == 0 else None
        poll = first_of(notices.first if notices else None, heard)
        self.guard = PreemptionGuard(self.ckpt, poll=poll, give_up=self.failing)
        self.attempt = control.call("start", rank, timeout_s=60) if control is not None else 0
        self.resumed: CheckpointRef | None = None
        self.start = 0
        self._reported = 0

    def resume(self) -> int:
        """Load the checkpoint `checkpoint.resume` (or a restart) asks for; the start step."""
        self.resumed = self.ckpt.resume(self.state, restarted=self.attempt > 0)
        self.start = self.resumed.step if self.resumed else 0
        if self.resumed:
            log.warning("resumed from %s (attempt %d)", self.resumed.uri, self.attempt)
        return self.start

    def after_step(self, step: int, row: dict) -> None:
        """Save when the interval says so; add the checkpoint fields to the metrics row."""
        if self.ckpt.due(step) and self.ckpt.save(step, self.state, defer=True):
            row["ckpt_blocked_s"] = self.ckpt.counters["last_blocked_s"]
        row.update(row_fields(self.ckpt.counters, self.ckpt.last_error, self._reported))
        self._reported = row["ckpt_failures"]

    def should_stop(self, step: int) -> bool:
        """After each step, on every rank: whether a preemption notice, or saves failing
        `max_failed_saves` times in a row, stop the run here."""
        if self.failing() and self.guard.requested_at is None:
            self.guard.requested_at = time.monotonic()  # the ranks agree as on a notice
        return self.guard.on_step_end(step, self.state)

    def failing(self) -> str | None:
        """Why the run must stop because its saves keep failing, or None."""
        limit = self.config.max_failed_saves
        in_a_row = int(self.ckpt.counters["saves_failed_in_a_row"])
        if not limit or in_a_row < limit:
            return None
        return (f"{in_a_row} checkpoint saves in a row failed (checkpoint.max_failed_saves="
                f"{limit}); last: {self.ckpt.last_error}")  # fmt: skip

    def abandon(self) -> None:
        """The loop failed: give a staged checkpoint a bounded chance to commit."""
        self.ckpt.drop_deferred()  # its step's row may not have left: the previous one stays
        self.ckpt.close(timeout=self.config.preemption_budget_s)

    def finish(self) -> dict:
        """The final save (unless preempted), then the checkpoint part of the final metrics."""
        stopped = self.guard.stopped_at
        if stopped is None and self.config.interval_steps and self.start < self.steps:
            self.ckpt.save(self.steps, self.state)
        self.ckpt.close()
        latest = self.ckpt.latest()
        final = row_fields(self.ckpt.counters, self.ckpt.last_error, 0)
        final["ckpt_uri"] = latest.uri if latest else None
        failing = self.failing()
        if failing and stopped is not None:
            final["ckpt_stopped"] = failing
        elif stopped is not None:
            final.update(preempted_at=stopped, preempt_reason=self.guard.reason)
            final["preempt_lost_steps"] = lost_steps(stopped, latest.step if latest else None,
                                                     self.start)  # fmt: skip
        return final


def lost_steps(stopped: int, committed: int | None, start: int) -> int:
    """What a stop cost: the steps trained after the newest committed checkpoint (after the
    start, when none was committed), which a resume trains again. 0 when the final save
    committed the step the run stopped after."""
    return max(0, stopped - (committed if committed is not None else start))
