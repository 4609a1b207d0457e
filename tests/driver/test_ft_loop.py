"""driver.ft.loop.train_steps_ft's bookkeeping around the engine: a failed commit is not a
step (no row, no checkpoint, the same step again), the writer (lowest live group) writes
the checkpoint and the full row, below the minimum FtStopped ends the loop with the
one-line reason (rows flushed), and a group that arrives after the run's done mark stops
at once. The engine itself is tested with real processes in tests/ft."""

from __future__ import annotations

import logging
from datetime import timedelta
from types import SimpleNamespace

import pytest

from driver.ft.loop import DONE_KEY, train_steps_ft
from driver.ft.replica import FtStopped


class Engine:
    """The parts of FtReplica the loop reads: the committed step, lowest_live."""

    def __init__(self, step=0):
        self.step, self.lowest_live = step, True


class Stepper:
    """Commits per `script`: True commits, False fails the vote, 'stop' raises FtStopped."""

    def __init__(self, script):
        self.script = list(script)

    def step(self, ft):
        what = self.script.pop(0)
        if what == "stop":
            raise FtStopped("ft: no quorum of ft.min_replicas=2 replica groups")
        if not what:
            return None
        ft.step += 1
        return {"step": ft.step, "loss": 1.0, "ft_quorum_size": 2}


class Reporter:
    def __init__(self):
        self.rows, self.full, self.flushed = [], [], False

    def add(self, row, full=None):
        self.rows.append(row)
        self.full.append(full)

    def flush(self):
        self.flushed = True


class Session:
    def __init__(self):
        self.saved, self.writer = [], None
        self.ckpt = SimpleNamespace(set_writer=lambda w: setattr(self, "writer", w))

    def after_step(self, step, row):
        self.saved.append(step)

    def should_stop(self, step):
        return False


def cfg(steps):
    return SimpleNamespace(
        train=SimpleNamespace(steps=steps), debug=SimpleNamespace(fail_at_step=None, fail_rank=0)
    )


LOG = logging.getLogger("test")


def test_failed_commits_are_not_steps_and_the_lowest_live_group_writes():
    reporter, session = Reporter(), Session()
    row = train_steps_ft(
        cfg(3), Engine(), Stepper([True, False, False, True, True]), session, reporter, LOG, 0
    )
    assert [r["step"] for r in reporter.rows] == [1, 2, 3] == session.saved
    assert row["step"] == 3 and reporter.flushed and session.writer is True
    assert reporter.full == [True] * 3


def test_the_writer_rule_decides_the_checkpoint_and_the_full_row():
    reporter, session = Reporter(), Session()
    writes = iter([False, True])
    train_steps_ft(cfg(2), Engine(), Stepper([True, True]), session, reporter, LOG, 1,
                   writer=lambda: next(writes))  # fmt: skip
    # rank 1 becomes the writer at step 2: it first sends its copy of step 1, which the
    # driver admits only if the old writer's row of step 1 never came (driver.ft.records)
    assert reporter.full == [False, True, True] and session.writer is True
    assert reporter.rows[1]["step"] == 1 and reporter.rows[1].get("copy") is True


def test_below_the_minimum_the_loop_ends_with_the_reason():
    reporter = Reporter()
    with pytest.raises(FtStopped, match="^ft: no quorum of ft.min_replicas=2"):
        train_steps_ft(cfg(5), Engine(), Stepper([True, "stop"]), None, reporter, LOG, 0)
    assert [r["step"] for r in reporter.rows] == [1] and reporter.flushed


def test_the_last_step_marks_the_run_done_and_a_late_group_stops_at_once():
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=5))
    train_steps_ft(cfg(2), Engine(), Stepper([True, True]), None, Reporter(), LOG, 0, client)
    assert store.get(DONE_KEY) == b"2"
    late = Reporter()
    row = train_steps_ft(cfg(2), Engine(), Stepper([]), None, late, LOG, 1, client)
    assert row == {} and late.rows == []
