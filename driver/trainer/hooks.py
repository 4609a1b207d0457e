"""Everything around a training step, as hooks of the one loop (driver.trainer.loop).

A hook has five calls, all optional: `start(trainer)` before the first step (after the
resume), `after_step(trainer, row)` after each committed step (it may add fields to the
row), `should_stop(trainer, step)` (asked of every hook after every step, on every rank:
the answer must be the same everywhere), `abandon(trainer)` when the loop failed (release
what it holds, no final save) and `close(trainer, finished)` when the loop ended (its
part of the final figures). The trainer calls them in the order the hooks were given:

    [DilocoHook, CheckpointHook, AuxHook, ReportHook, CommitHook, FaultHook]

so a checkpoint holds the step's DiLoCo merge, the row the reporter sends carries the
checkpoint's and the services' fields, a sync save commits after the step's row is written
by the driver (every commit waits for its rows: driver.metrics.rank.RankReporter.durable),
and an injected failure comes after the row left.
"""

from __future__ import annotations


class Hook:
    """A no-op hook; subclasses override what they need."""

    def start(self, trainer) -> None:
        pass

    def after_step(self, trainer, row: dict) -> None:
        pass

    def should_stop(self, trainer, step: int) -> bool:
        return False

    def abandon(self, trainer) -> None:
        pass

    def close(self, trainer, finished: bool) -> dict:
        return {}


class CheckpointHook(Hook):
    """Periodic saves, the preemption stop, the final save (driver.checkpoint.session)."""

    def __init__(self, session):
        self.session = session

    def after_step(self, trainer, row: dict) -> None:
        writer = trainer.stepper.checkpoint_writer()
        if writer is not None:  # torchft: only the writer's group writes
            self.session.ckpt.set_writer(writer)
        self.session.after_step(row["step"], row)

    def should_stop(self, trainer, step: int) -> bool:
        return self.session.should_stop(step)

    def abandon(self, trainer) -> None:
        self.session.abandon()

    def close(self, trainer, finished: bool) -> dict:
        if not finished:
            return {}
        if trainer.finished_elsewhere:  # the groups that finished wrote the final save
            self.session.ckpt.set_writer(False)
        final = self.session.finish()
        newest = self.session.ckpt.latest()
        if getattr(trainer.stepper, "took_over", False) and newest:  # not its own saves
            final["ckpt_committed_step"] = newest.step
        return final


class CommitHook(Hook):
    """Commits the step's sync save (written by CheckpointHook, deferred until ReportHook
    has queued the step's row: the commit waits for that row to be written)."""

    def __init__(self, session):
        self.session = session

    def after_step(self, trainer, row: dict) -> None:
        self.session.ckpt.commit_deferred()


class AuxHook(Hook):
    """Auxiliary services: the writer's weight refresh and evaluations, and the services'
    figures in the writer's rows (driver.aux.session)."""

    def __init__(self, aux, model):
        self.aux, self.model = aux, model

    def after_step(self, trainer, row: dict) -> None:
        gathers = trainer.stepper.in_writer_copy()  # a sharded model's gather takes them all
        self.aux.after_step(row["step"], self.model, writer=trainer.writer, gathers=gathers)
        if not trainer.writer:
            return
        if row["step"] == trainer.steps:  # a fresh poll, taken before the row is queued
            row.update(self.aux.metrics(final=True))
        elif trainer.reporter.due():
            row.update(self.aux.metrics())

    def abandon(self, trainer) -> None:
        self.aux.close(wait=False)

    def close(self, trainer, finished: bool) -> dict:
        return self.aux.close(wait=finished, writer=trainer.writer)


class DilocoHook(Hook):
    """A DiLoCo learner's outer step every `diloco.sync_every` steps (driver.diloco.hook)."""

    def __init__(self, learner, model):
        self.learner, self.model = learner, model

    def start(self, trainer) -> None:
        self.learner.start(self.model)  # join after the restore: a restored learner resumes

    def after_step(self, trainer, row: dict) -> None:
        self.learner.after_step(row["step"] - 1, self.model)
        row.update(self.learner.metrics())  # its round, merges and waits

    def abandon(self, trainer) -> None:
        self.learner.end(self.model, finished=False)

    def close(self, trainer, finished: bool) -> dict:
        self.learner.end(self.model, finished)  # the last round's merge, then the link
        return {}


class ReportHook(Hook):
    """Every rank's row to the run's channel; the writer's is the step's row of record."""

    def after_step(self, trainer, row: dict) -> None:
        for each, full in trainer.stepper.rows(row, trainer.writer):
            trainer.reporter.add(each, full=full)


class FaultHook(Hook):
    """The step's last fault point (driver.trainer.faults: `debug.fail_at_step` raises,
    `debug.kill_phase: after` kills), after the step's row left."""

    def __init__(self, faults):
        self.faults = faults

    def after_step(self, trainer, row: dict) -> None:
        self.faults.at(row["step"] - 1, "after")


class FeedHook(Hook):
    """Closes the worker's batch feed (its pipeline's processes) however the loop ends."""

    def __init__(self, feed):
        self.feed = feed

    def abandon(self, trainer) -> None:
        self.feed.close()

    def close(self, trainer, finished: bool) -> dict:
        self.feed.close()
        return {}
