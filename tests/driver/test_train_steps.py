"""driver.loop.train_steps's rows: rank 0's last row carries the auxiliary services' final
figures, taken before that row is queued (the reporter's thread may send a queued row at
any moment), whether the run ends at `train.steps` or at a preemption stop; the newest
figures ride on a row once per reporter interval; other ranks never ask for them; the
reporter is flushed however the loop ends."""

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
    def __init__(self, stop_at=None):
        self.stop_at = stop_at

    def after_step(self, step, row):
        pass

    def should_stop(self, step):
        return step == self.stop_at


def cfg(steps, fail_at=None):
    return SimpleNamespace(train=SimpleNamespace(steps=steps),
                           debug=SimpleNamespace(fail_at_step=fail_at, fail_rank=0))  # fmt: skip


def run(steps, reporter, aux, session=None, fail_at=None):
    loop = Loop()
    loop.model = None
    return train_steps(cfg(steps, fail_at), loop, iter(range(100)), session, 0, reporter,
                       LOG, aux)  # fmt: skip


@pytest.mark.parametrize(
    ("steps", "stop_at", "last"),
    [(3, None, 3), (5, 2, 2), (1, None, 1)],
    ids=["the last step", "a preemption stop", "a one-step run"],
)
def test_the_last_row_carries_the_final_figures(steps, stop_at, last):
    reporter, aux = Reporter(due=[True]), Aux()
    row = run(steps, reporter, aux, Session(stop_at))
    assert [r["step"] for r in reporter.rows] == list(range(1, last + 1))
    assert reporter.rows[-1]["aux/scored"] == "final" and row["aux/scored"] == "final"
    assert aux.asked[-1] is True and aux.asked.count(True) == 1
    assert reporter.flushed


def test_the_newest_figures_ride_on_a_row_when_due():
    reporter, aux = Reporter(due=[True, False, True]), Aux()
    run(4, reporter, aux)
    assert [r.get("aux/scored") for r in reporter.rows] == ["newest", None, "newest", "final"]


def test_other_ranks_never_ask_for_the_figures():
    reporter, aux = Reporter(rank=1, due=[True] * 5), Aux()
    run(3, reporter, aux)
    assert aux.asked == [] and all("aux/scored" not in r for r in reporter.rows)


def test_a_failure_still_flushes_the_rows_so_far():
    reporter = Reporter()
    with pytest.raises(RuntimeError, match="injected failure on rank 0"):
        run(5, reporter, Aux(), fail_at=1)
    assert [r["step"] for r in reporter.rows] == [1, 2] and reporter.flushed
