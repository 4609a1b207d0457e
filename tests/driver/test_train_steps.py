"""driver.loop.train_steps's rows: rank 0's row of the step that reaches `train.steps`
carries a fresh poll of the auxiliary services' figures, taken before that row is queued
(the reporter's thread may send a queued row at any moment); the newest figures ride on a
row once per reporter interval; other ranks never ask for them; a preemption stop queues
its step's row before the stop's agreement and final save and asks for no fresh poll;
every rank calls `should_stop` (a collective) once per step, in order; the reporter is
flushed however the loop ends."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from driver.loop import train_steps

LOG = logging.getLogger("test")


class Reporter:
    def __init__(self, rank=0, due=()):
        self.rank, self.rows, self.flushed, self.dues = rank, [], False, list(due)

    def due(self):
        return self.dues.pop(0) if self.dues else False

    def add(self, row, full=None):
        self.rows.append(dict(row))  # a copy: what was queued, as the sending thread sees it

    def flush(self):
        self.flushed = True


class Loop:
    def step(self, step, batches):
        next(batches)
        return {"step": step + 1, "loss": 1.0}


class Aux:
    def __init__(self):
        self.asked: list[bool] = []

    def batches(self, it):
        return it

    def after_step(self, step, model):
        pass

    def metrics(self, final=False):
        self.asked.append(final)
        return {"aux/scored": "final" if final else "newest"}


class Session:
    def __init__(self, reporter, stop_at=None):
        self.reporter, self.stop_at, self.asked = reporter, stop_at, []

    def after_step(self, step, row):
        pass

    def should_stop(self, step):
        self.asked.append(step)
        assert self.reporter.rows[-1]["step"] == step  # the step's row is queued first
        return step == self.stop_at


def cfg(steps, fail_at=None):
    return SimpleNamespace(train=SimpleNamespace(steps=steps),
                           debug=SimpleNamespace(fail_at_step=fail_at, fail_rank=0))  # fmt: skip


def run(steps, reporter, aux, session=None, fail_at=None):
    loop = Loop()
    loop.model = None
    return train_steps(cfg(steps, fail_at), loop, iter(range(100)), session, 0, reporter,
                       LOG, aux)  # fmt: skip


@pytest.mark.parametrize("steps", [3, 1], ids=["the last step", "a one-step run"])
def test_the_last_row_carries_the_final_figures(steps):
    reporter, aux = Reporter(due=[True]), Aux()
    session = Session(reporter)
    row = run(steps, reporter, aux, session)
    assert [r["step"] for r in reporter.rows] == list(range(1, steps + 1))
    assert reporter.rows[-1]["aux/scored"] == "final" and row["aux/scored"] == "final"
    assert aux.asked.count(True) == 1 and aux.asked[-1] is True
    assert session.asked == list(range(1, steps + 1)) and reporter.flushed


@pytest.mark.parametrize("rank", [0, 1])
def test_a_preemption_stop_queues_the_row_first_and_polls_nothing_fresh(rank):
    reporter, aux = Reporter(rank=rank, due=[True, False]), Aux()
    session = Session(reporter, stop_at=2)
    run(5, reporter, aux, session)
    assert [r["step"] for r in reporter.rows] == [1, 2] and session.asked == [1, 2]
    assert True not in aux.asked and reporter.flushed


def test_the_newest_figures_ride_on_a_row_when_due():
    reporter, aux = Reporter(due=[True, False, True]), Aux()
    run(4, reporter, aux)
    assert [r.get("aux/scored") for r in reporter.rows] == ["newest", None, "newest", "final"]


@pytest.mark.parametrize("aux", [True, False], ids=["with aux", "without"])
def test_other_ranks_never_ask_for_the_figures(aux):
    reporter = Reporter(rank=1, due=[True] * 5)
    services, session = (Aux() if aux else None), Session(reporter)
    run(3, reporter, services, session)
    assert all("aux/scored" not in r for r in reporter.rows) and session.asked == [1, 2, 3]
    assert services is None or services.asked == []


def test_a_failure_still_flushes_the_rows_so_far():
    reporter, aux = Reporter(), Aux()
    session = Session(reporter)
    with pytest.raises(RuntimeError, match="injected failure on rank 0"):
        run(5, reporter, aux, session, fail_at=1)
    assert [r["step"] for r in reporter.rows] == [1, 2] and reporter.flushed
    assert aux.asked == [] and session.asked == [1]  # no blocking poll on the way out
