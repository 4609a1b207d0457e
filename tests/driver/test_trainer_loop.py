"""The one trainer's loop (driver.trainer.loop) with its real hooks over fakes of the
stepper, the checkpoint session, the services and the reporter: a failed commit is not a
step; the writer's row carries the services' figures (a fresh poll on the last step, taken
before the row is queued; the newest ones when the reporter is due) and other ranks never
ask; a stop queues its step's row before the stop's agreement, and every hook is asked once
per step, in order; the reporter is flushed however the loop ends; a worker whose run
finished elsewhere stops at once; the final figures come from every hook. The steppers
themselves are tested with real processes (tests/driver/test_e2e.py, tests/ft)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from driver.ft.replica import FtStopped
from driver.trainer import hooks as h
from driver.trainer.faults import Faults
from driver.trainer.loop import RunFinished, Trainer

LOG = logging.getLogger("test")


class Stepper:
    """Commits per `script`: True commits, False fails the vote, 'stop' raises FtStopped,
    'finished' raises RunFinished. `writers`: whether this rank writes each step."""

    def __init__(self, script, writers=None):
        self.script, self.step, self.closed, self.ended = list(script), 0, False, None
        self.writers = list(writers or [])

    def run(self):
        what = self.script.pop(0)
        if what == "stop":
            raise FtStopped("ft: no quorum of ft.min_replicas=2 replica groups")
        if what == "finished":
            raise RunFinished
        if not what:
            return None
        self.step += 1
        return {"step": self.step, "loss": 1.0 / self.step}

    def writer(self):
        self.last = self.writers.pop(0) if self.writers else True
        return self.last

    def in_writer_copy(self):
        return self.last

    def rows(self, row, writer):
        return [(row, writer)]

    def checkpoint_writer(self):
        return None

    def end(self, reporter, logger, completed, stopped=False):
        self.ended = completed
        return completed

    def metrics(self):
        return {"stepper": 1}

    def close(self):
        self.closed = True


class Reporter:
    def __init__(self, due=()):
        self.rows, self.full, self.flushed, self.dues = [], [], 0, list(due)

    def due(self):
        return self.dues.pop(0) if self.dues else False

    def add(self, row, full=None):
        self.rows.append(dict(row))  # a copy: what was queued, as the sending thread sees it
        self.full.append(full)

    def flush(self):
        self.flushed += 1


class Aux:
    def __init__(self):
        self.asked, self.refreshed, self.closed = [], [], None

    def after_step(self, step, model, writer=True, gathers=None):
        self.refreshed.append((step, writer))

    def metrics(self, final=False):
        self.asked.append(final)
        return {"aux/scored": "final" if final else "newest"}

    def close(self, wait=True, writer=None):
        self.closed, self.closed_as_writer = wait, writer
        return {"aux/closed": wait}


class Session:
    """A checkpoint session: records saves and stop questions; stops at `stop_at`."""

    def __init__(self, reporter, stop_at=None):
        self.reporter, self.stop_at = reporter, stop_at
        self.saved, self.asked, self.abandoned = [], [], False
        self.ckpt = SimpleNamespace(set_writer=lambda w: None, latest=lambda: None)

    def after_step(self, step, row):
        self.saved.append(step)
        row["ckpt_saved"] = step

    def should_stop(self, step):
        self.asked.append(step)
        assert self.reporter.rows[-1]["step"] == step  # the step's row is queued first
        return step == self.stop_at

    def abandon(self):
        self.abandoned = True

    def finish(self):
        return {"ckpt_final": True}


def cfg(steps, fail_at=None):
    debug = SimpleNamespace(fail_at_step=fail_at, fail_rank=0, kill_at_step=None, kill_rank=0,
                            kill_phase="after", stop_at_step=None, term_at_step=None)  # fmt: skip
    return SimpleNamespace(train=SimpleNamespace(steps=steps), debug=debug)


def trainer(steps, stepper, reporter, aux=None, session=None, fail_at=None, rank=0):
    order = [
        h.CheckpointHook(session) if session else None,
        h.AuxHook(aux, None) if aux else None,
        h.ReportHook(),
        h.FaultHook(Faults(cfg(steps, fail_at).debug, rank)),
    ]
    return Trainer(cfg(steps, fail_at), stepper, [o for o in order if o], reporter, LOG)


def test_failed_commits_are_not_steps():
    reporter = Reporter()
    session = Session(reporter)
    t = trainer(3, Stepper([True, False, False, True, True]), reporter, session=session)
    final = t.run()
    assert [r["step"] for r in reporter.rows] == [1, 2, 3] == session.saved == session.asked
    assert final == {"final_loss": 1 / 3, "steps": 3, "ckpt_final": True, "stepper": 1}
    assert t.reports and t.stepper.ended is True and t.stepper.closed


@pytest.mark.parametrize("steps", [3, 1], ids=["the last step", "a one-step run"])
def test_the_last_row_carries_a_fresh_poll_of_the_services(steps):
    reporter, aux = Reporter(due=[True]), Aux()
    session = Session(reporter)
    trainer(steps, Stepper([True] * steps), reporter, aux, session).run()
    assert [r["step"] for r in reporter.rows] == list(range(1, steps + 1))
    assert reporter.rows[-1]["aux/scored"] == "final" and reporter.rows[-1]["ckpt_saved"] == steps
    assert aux.asked.count(True) == 1 and aux.asked[-1] is True and aux.closed is True
    assert aux.closed_as_writer is True  # the last step's writer returns the scores


def test_the_newest_figures_ride_on_a_row_when_due():
    reporter, aux = Reporter(due=[True, False, True]), Aux()
    trainer(4, Stepper([True] * 4), reporter, aux).run()
    assert [r.get("aux/scored") for r in reporter.rows] == ["newest", None, "newest", "final"]


def test_only_the_writer_asks_for_the_figures_and_refreshes():
    reporter, aux = Reporter(due=[True] * 5), Aux()
    stepper = Stepper([True] * 3, writers=[False, True, False])
    trainer(3, stepper, reporter, aux).run()
    assert [r.get("aux/scored") for r in reporter.rows] == [None, "newest", None]
    assert aux.refreshed == [(1, False), (2, True), (3, False)]
    assert reporter.full == [False, True, False]


def test_a_stop_queues_the_row_first_polls_nothing_fresh_and_reports_no_end():
    reporter, aux = Reporter(due=[True, False]), Aux()
    session = Session(reporter, stop_at=2)
    t = trainer(5, Stepper([True] * 5), reporter, aux, session)
    t.run()
    assert [r["step"] for r in reporter.rows] == [1, 2] and session.asked == [1, 2]
    assert True not in aux.asked and reporter.flushed and t.stepper.ended is False


def test_a_failure_flushes_the_rows_so_far_and_every_hook_lets_go():
    reporter, aux = Reporter(), Aux()
    session = Session(reporter)
    stepper = Stepper([True] * 5)
    with pytest.raises(RuntimeError, match="injected failure on rank 0"):
        trainer(5, stepper, reporter, aux, session, fail_at=1).run()
    assert [r["step"] for r in reporter.rows] == [1, 2] and reporter.flushed
    assert session.asked == [1] and session.abandoned and aux.closed is False
    assert stepper.closed and True not in aux.asked  # no blocking poll on the way out


def test_below_the_minimum_the_loop_ends_with_the_reason():
    reporter = Reporter()
    with pytest.raises(FtStopped, match="^ft: no quorum of ft.min_replicas=2"):
        trainer(5, Stepper([True, "stop"]), reporter).run()
    assert [r["step"] for r in reporter.rows] == [1] and reporter.flushed


def test_a_worker_whose_run_finished_elsewhere_stops_cleanly():
    reporter = Reporter()
    t = trainer(3, Stepper([True, "finished"]), reporter)
    final = t.run()
    assert [r["step"] for r in reporter.rows] == [1] and t.finished_elsewhere
    assert not t.reports and final["final_loss"] == 1.0
