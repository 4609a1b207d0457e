"""One metrics row of record per committed step when the writer dies (driver.ft.records on
the groups' side, driver.metrics.records on the driver's), and the loop's end of run:
the writer's mark, the next group's copies, a group that finds the run finished."""

from __future__ import annotations

import logging
from datetime import timedelta
from types import SimpleNamespace

import pytest

from driver.ft.loop import DONE_KEY, RunEnd, train_steps_ft
from driver.ft.records import RECORDED_KEY, Copies, mark_recorded, wait_recorded
from driver.ft.replica import FtStopped
from driver.metrics.rank import COPY, of_record
from driver.metrics.records import BACKFILLED, RecordBook

LOG = logging.getLogger("test")


def row(step: int, t: float | None = None, **extra) -> dict:
    return {"step": step, "loss": 1.0 / step, "time": float(step if t is None else t), **extra}


def test_copies_are_sent_when_a_group_becomes_the_writer_and_only_then():
    copies = Copies(keep=3)
    assert copies.after_step(row(1), wrote=True) == []  # the writer from the start
    assert [copies.after_step(row(s), wrote=False) for s in (2, 3, 4, 5)] == [[]] * 4
    sent = copies.after_step(row(6), wrote=True)  # the old writer is gone: its last rows
    assert [(c["step"], c[COPY]) for c in sent] == [(3, True), (4, True), (5, True)]
    assert copies.after_step(row(7), wrote=True) == []  # nothing new kept meanwhile


@pytest.mark.parametrize(
    ("arrivals", "record"),
    [
        # the writer's rows arrived: the copies stay copies
        ([row(1), row(2), row(1, **{COPY: True}), row(2, **{COPY: True})], [(1, 0), (2, 1)]),
        # the writer's row of step 2 was lost: the copy becomes it
        (
            [row(1), row(1, **{COPY: True}), row(2, **{COPY: True}), row(3)],
            [(1, 0), (2, 2), (3, 3)],
        ),
        # two groups' copies of one lost step: the first one
        ([row(2, **{COPY: True}), row(2, **{COPY: True})], [(2, 0)]),
        # a late writer's row committed before its step's copy was admitted: a copy now
        ([row(2, 2.0, **{COPY: True}), row(2, 1.5)], [(2, 0)]),
        # the step run again after a restart (committed later): kept
        ([row(2, 2.0, **{COPY: True}), row(2, 500.0)], [(2, 0), (2, 1)]),
        # without copies, every row of record is kept (restarts repeat steps)
        ([row(1), row(2), row(1, 9.0), row(2, 10.0)], [(1, 0), (2, 1), (1, 2), (2, 3)]),
    ],
)
def test_the_driver_keeps_one_row_of_record_per_step(arrivals, record):
    copies = [bool(r.get(COPY)) for r in arrivals]
    RecordBook(clock=lambda: 100.0).admit(arrivals)
    kept = [(r["step"], i) for i, r in enumerate(arrivals) if of_record(r)]
    assert kept == record
    assert [bool(arrivals[i].get(BACKFILLED)) for _, i in kept] == [copies[i] for _, i in kept]


def test_the_record_book_forgets_old_steps():
    book = RecordBook(keep=4)
    book.admit([row(s) for s in range(1, 20)])
    assert len(book.steps) <= 8 and 19 in book.steps


# ---- the loop's end of run (fakes of the engine, stepper, reporter) -------------------------


class Engine:
    def __init__(self, positions):
        self.step, self.positions, self.plan = 0, list(positions), None


class Stepper:
    """Commits one step per call at the next scripted quorum position; 'stop' raises
    FtStopped; 'finish' marks the run done by another group first (its last step)."""

    def __init__(self, script, store=None):
        self.script, self.store = list(script), store

    def step(self, ft):
        what = self.script.pop(0)
        if what == "stop":
            raise FtStopped("ft: no quorum of ft.min_replicas=2 replica groups")
        if what == "finish":
            self.store.set(DONE_KEY, "9")
            raise FtStopped("ft: no quorum of ft.min_replicas=2 replica groups")
        ft.plan = SimpleNamespace(position=what)
        ft.step += 1
        return {"step": ft.step, "loss": 1.0, "time": float(ft.step), "ft_quorum_size": 2}


class Reporter:
    def __init__(self):
        self.sent = []

    def add(self, row, full=None):
        self.sent.append((row["step"], bool(full), bool(row.get(COPY))))

    def flush(self):
        pass


def cfg(steps):
    return SimpleNamespace(
        train=SimpleNamespace(steps=steps), debug=SimpleNamespace(fail_at_step=None, fail_rank=0)
    )


@pytest.fixture
def store():
    from torch.distributed import TCPStore

    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = TCPStore("127.0.0.1", master.port, is_master=False, timeout=timedelta(seconds=5))
    yield client


def run(steps, positions, store, script=None):
    ft, reporter, end = Engine(positions), Reporter(), RunEnd()
    stepper = Stepper(script if script is not None else positions, store)
    train_steps_ft(cfg(steps), ft, stepper, None, reporter, LOG, 1, store,
                   writer=lambda: ft.plan.position == 0, end=end)  # fmt: skip
    return reporter.sent, end


def test_a_group_that_becomes_the_writer_first_sends_its_copies(store):
    sent, end = run(4, [1, 1, 0, 0], store)
    assert sent == [(1, False, False), (2, False, False), (1, True, True), (2, True, True),
                    (3, True, False), (4, True, False)]  # fmt: skip
    assert end.reports  # it wrote the last step


def test_at_the_end_the_next_group_sends_copies_when_the_writer_left_no_mark(store, monkeypatch):
    import driver.ft.end as ft_end

    monkeypatch.setattr(ft_end, "wait_recorded", lambda s, step: wait_recorded(s, step, 0.2))
    sent, end = run(2, [1, 1], store)
    assert sent == [(1, False, False), (2, False, False), (1, True, True), (2, True, True)]
    assert end.reports and store.get(DONE_KEY) == b"2"


def test_at_the_end_the_next_group_sends_nothing_when_the_writer_marked_its_rows(store):
    mark_recorded(store, 2)  # the writer's rows and final save are in
    sent, end = run(2, [1, 1], store)
    assert sent == [(1, False, False), (2, False, False)] and not end.reports
    assert wait_recorded(store, 2, 0.0) and not wait_recorded(store, 3, 0.0)
    assert store.get(RECORDED_KEY) == b"2"


def test_a_group_waiting_for_a_quorum_after_the_others_finished_stops_cleanly(store):
    """Below ft.min_replicas because the others finished the run: not a failure."""
    sent, end = run(3, [0], store, script=[0, "finish"])
    assert sent == [(1, True, False)] and not end.reports


def test_without_the_done_mark_fewer_groups_than_the_minimum_still_stop_the_run(store):
    with pytest.raises(FtStopped):
        run(3, [0], store, script=[0, "stop"])
