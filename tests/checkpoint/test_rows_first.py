"""A checkpoint commits only after its steps' rows are written by the driver.

Rank 0 calls `Checkpointer.before_commit(step)` before the marker (the trainer sets it to
its RankReporter.durable, which waits until the driver has written the rows through that
step: driver.metrics.rank); raising refuses the commit. A sync save made with `defer`
writes its shards and commits only at `commit_deferred()` (after the step's row left)."""

from __future__ import annotations

import threading
import time

import pytest

from driver.channel import DriverChannel, RunChannel
from driver.metrics import rank
from tests.checkpoint.toy import config, make_state


def sync(root: str):
    return config(root, interval_steps=1, async_mode="sync", keep_last=0)


def test_a_commit_waits_for_its_rows_and_a_refusal_keeps_the_previous_checkpoint(
    root, checkpointers
):
    ckpt = checkpointers(sync(root), "team", "rows")
    asked: list[int] = []
    ckpt.before_commit = asked.append
    state = make_state()
    assert ckpt.save(1, state) and ckpt.latest().step == 1 and asked == [1]

    def refuse(step: int) -> None:
        raise TimeoutError(f"the row of step {step} was not reported in 30s")

    ckpt.before_commit = refuse
    ckpt.save(2, state)
    assert ckpt.latest().step == 1  # not committed ahead of its row; step-2 is removed
    assert ckpt.counters["saves_failed"] == 1 and "step 2" in ckpt.last_error
    assert 2 not in ckpt.storage.step_dirs()


def test_a_deferred_sync_save_commits_only_when_asked(root, checkpointers):
    ckpt = checkpointers(sync(root), "team", "defer")
    state = make_state()
    assert ckpt.save(1, state, defer=True)
    assert ckpt.latest() is None  # written, not committed
    ckpt.commit_deferred()
    assert ckpt.latest().step == 1
    ckpt.save(2, state, defer=True)
    ckpt.drop_deferred()  # the loop failed before the step's row left
    ckpt.commit_deferred()
    assert ckpt.latest().step == 1
    ckpt.save(3, state, defer=True)
    assert ckpt.wait() and ckpt.latest().step == 3  # waiting commits what was deferred


class Sink:
    """The reporter's two channel calls, in order."""

    def __init__(self, answer=True):
        self.calls: list[tuple] = []
        self.answer = answer

    def send(self, method, rows):
        self.calls.append((method, [r["step"] for r in rows]))

    def call(self, method, timeout_s):
        self.calls.append((method, timeout_s > 0))
        return self.answer


def test_durable_sends_the_steps_row_when_it_comes_then_asks_the_driver_to_write():
    sink = Sink()
    reporter = rank.RankReporter(sink, 0, 0, every_s=3600, idle_s=3600)
    reporter.add({"step": 1, "step_time": 0.1, "time": 1.0, "loss": 2.0})
    later = threading.Timer(0.2, reporter.add, [{"step": 2, "step_time": 0.1, "time": 2.0}])
    later.start()  # an async save's commit comes before its step's row
    reporter.durable(2, timeout_s=30)
    assert sink.calls == [("push_many", [1, 2]), ("persist", True)]
    reporter.flush()


@pytest.mark.parametrize("answer, error", [(True, TimeoutError), (False, RuntimeError)])
def test_durable_refuses_when_the_row_never_comes_or_the_driver_is_closing(answer, error):
    reporter = rank.RankReporter(Sink(answer), 0, 0, every_s=3600, idle_s=3600)
    step = 1 if answer else 0  # no row of step 1 is ever added; step 0 needs none
    with pytest.raises(error):
        reporter.durable(step, timeout_s=0.2)
    reporter.flush()


def test_persist_over_the_real_channel_writes_what_was_sent_before_it():
    """A worker's rows, then `persist`: the driver's writer runs with every row sent before
    it, outside the state's lock (it drains the channel itself)."""
    channel = DriverChannel.start(RunChannel())
    written: list[int] = []

    def persist() -> bool:
        written.extend(row["step"] for row in channel.drain())
        return True

    channel.persist = persist
    client = channel.address.connect(0)
    try:
        reporter = rank.RankReporter(client, 0, 0, every_s=3600, idle_s=3600)
        for step in (1, 2, 3):
            reporter.add({"step": step, "step_time": 0.1, "time": time.time(), "loss": 1.0})
        reporter.durable(3, timeout_s=30)
        assert written == [1, 2, 3]
        reporter.flush()
    finally:
        client.close()
        channel.close()
