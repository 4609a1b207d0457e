"""One metrics row of record per committed step when the writer dies (driver.ft.records on
the groups' side, driver.metrics.records on the driver's), and the torchft stepper's end of
run: the writer's mark, the next group's copies, a group that finds the run finished."""

from __future__ import annotations

import logging
from datetime import timedelta
from types import SimpleNamespace

import pytest

from driver.ft.end import DONE_KEY
from driver.ft.records import RECORDED_KEY, Copies, mark_recorded, wait_recorded
from driver.ft.replica import FtStopped
from driver.metrics.rank import COPY, of_record
from driver.metrics.records import BACKFILLED, RecordBook
from driver.trainer.loop import RunFinished

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


# ---- the torchft stepper's rows and end of run (fakes of the engine, core, reporter) -------


class Engine:
    """The parts of FtReplica the stepper's bookkeeping reads."""

    def __init__(self):
        self.step, self.plan = 0, None


class Reporter:
    def __init__(self):
        self.sent = []

    def add(self, row, full=None):
        self.sent.append((row["step"], bool(full), bool(row.get(COPY))))

    def flush(self):
        pass


@pytest.fixture
def store():
    from torch.distributed import TCPStore

    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = TCPStore("127.0.0.1", master.port, is_master=False, timeout=timedelta(seconds=5))
    yield client


def stepper(store):
    from driver.ft.stepper import FtStepper
    from driver.parallel import Topology

    train = SimpleNamespace(micro_batch_size=4, grad_accum_steps=1, steps=2)
    core = SimpleNamespace(cfg=SimpleNamespace(train=train))
    return FtStepper(core, Engine(), Topology(world=2), rank=1, done=store)


def run(positions, store, steps=None):
    """Rank 1 commits one step per quorum position; its rows as the trainer reports them,
    then the end of the run; (what was sent, whether it reports the final figures)."""
    ft_stepper, reporter = stepper(store), Reporter()
    for step, position in enumerate(positions, 1):
        ft_stepper.ft.plan, ft_stepper.ft.step = SimpleNamespace(position=position), step
        writer = ft_stepper.writer()
        for each, full in ft_stepper.rows(row(step), writer):
            reporter.add(each, full)
    reports = ft_stepper.end(reporter, LOG, completed=True)
    return reporter.sent, reports, ft_stepper


def test_a_group_that_becomes_the_writer_first_sends_its_copies(store):
    sent, reports, _ = run([1, 1, 0, 0], store)
    assert sent == [(1, False, False), (2, False, False), (1, True, True), (2, True, True),
                    (3, True, False), (4, True, False)]  # fmt: skip
    assert reports  # it wrote the last step


def test_a_writer_handing_back_sends_its_rows_before_the_steps_collectives(store):
    """Rank 1 writes steps 1-2 while group 0 is missing; group 0 is back at step 3's quorum:
    rank 1 sends its unsent rows then (once), before the new writer has a row of step 3."""
    ft_stepper, sent = stepper(store), []
    ft_stepper.hand_back = lambda: sent.append(ft_stepper.ft.step)
    for step, position in enumerate([0, 0, 1, 1, 0], 1):
        ft_stepper.ft.plan, ft_stepper.ft.step = SimpleNamespace(position=position), step
        ft_stepper.after_quorum(position)
        ft_stepper.rows(row(step), ft_stepper.writer())
    assert sent == [3]


def test_at_the_end_the_next_group_sends_copies_when_the_writer_left_no_mark(store, monkeypatch):
    import driver.ft.end as ft_end

    monkeypatch.setattr(ft_end, "wait_recorded", lambda s, step: wait_recorded(s, step, 0.2))
    sent, reports, ft_stepper = run([1, 1], store)
    assert sent == [(1, False, False), (2, False, False), (1, True, True), (2, True, True)]
    assert reports and ft_stepper.took_over and store.get(DONE_KEY) == b"2"


def test_at_the_end_the_next_group_sends_nothing_when_the_writer_marked_its_rows(store):
    mark_recorded(store, 2)  # the writer's rows and final save are in
    sent, reports, _ = run([1, 1], store)
    assert sent == [(1, False, False), (2, False, False)] and not reports
    assert wait_recorded(store, 2, 0.0) and not wait_recorded(store, 3, 0.0)
    assert store.get(RECORDED_KEY) == b"2"


def test_an_early_stop_reports_nothing_and_marks_nothing(store):
    ft_stepper = stepper(store)
    ft_stepper.ft.plan = SimpleNamespace(position=0)
    assert ft_stepper.end(Reporter(), LOG, completed=False) is False
    assert not store.check([DONE_KEY])


class StoppingEngine(Engine):
    """begin_step raises FtStopped (too few groups); `finish` marks the run done first."""

    def __init__(self, store=None):
        super().__init__()
        self.store = store

    def begin_step(self):
        if self.store is not None:
            self.store.set(DONE_KEY, "9")
        raise FtStopped("ft: no quorum of ft.min_replicas=2 replica groups")


def test_a_group_waiting_for_a_quorum_after_the_others_finished_stops_cleanly(store):
    """Below ft.min_replicas because the others finished the run: not a failure."""
    ft_stepper = stepper(store)
    ft_stepper.ft, ft_stepper.committed = StoppingEngine(store), 1
    with pytest.raises(RunFinished):
        ft_stepper.run()


def test_without_the_done_mark_fewer_groups_than_the_minimum_still_stop_the_run(store):
    ft_stepper = stepper(store)
    ft_stepper.ft, ft_stepper.committed = StoppingEngine(), 1
    with pytest.raises(FtStopped):
        ft_stepper.run()


def test_a_replacement_that_arrives_after_the_end_does_not_train(store):
    store.set(DONE_KEY, "2")
    with pytest.raises(RunFinished):
        stepper(store).run()
