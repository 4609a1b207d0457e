"""The pieces the training driver adds around the Checkpointer: restart-aware resume, the
control actor's body, the SIGTERM relay, polled preemption notices, listener names and the
metrics fields (one process, no Ray)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from driver.checkpoint import PreemptionGuard
from driver.checkpoint.api import new_counters, row_fields
from driver.checkpoint.control import RunControl, relay_sigterm
from driver.checkpoint.listeners import listener_name, listener_names
from tests.checkpoint.toy import config, make_state, train


def test_restarted_group_prefers_the_runs_newest_checkpoint_over_the_uri(root, checkpointers):
    ckpt = checkpointers(config(root, keep_last=0), "team", "run")
    train(make_state(), ckpt, 1, 6)
    ckpt.wait()
    uri = ckpt.storage.uri("step-3")
    fresh = checkpointers(config(root, resume=uri), "team", "run")
    assert fresh.resume(make_state()).step == 3  # first attempt: the URI asked for
    restarted = checkpointers(config(root, resume=uri), "team", "run")
    assert restarted.resume(make_state(), restarted=True).step == 6
    other = checkpointers(config(root, resume=None), "team", "other")
    assert other.resume(make_state(), restarted=True) is None  # nothing committed yet


def test_save_of_an_already_saved_step_is_skipped(root, checkpointers):
    ckpt = checkpointers(config(root), "team", "run")
    state = make_state()
    train(state, ckpt, 1, 3)
    assert ckpt.wait() and ckpt.save(3, state)  # the final save of a step already saved
    assert ckpt.metrics()["saves_started"] == 1
    loaded = checkpointers(config(root), "team", "run")
    ref = loaded.resume(make_state())
    assert ref.same_layout and loaded.metrics()["last_committed_step"] == 3
    assert loaded.save(3, state) and loaded.metrics()["saves_started"] == 0


def test_polled_notice_stops_the_loop_after_a_final_save(root, checkpointers):
    ckpt = checkpointers(config(root, interval_steps=100), "team", "run")
    notices = [None, time.time() - 1.0]  # nothing after step 1; a notice 1 s old after step 2
    guard = PreemptionGuard(ckpt, poll=lambda: notices.pop(0))
    state = make_state()
    train(state, ckpt, 1, 1)
    assert guard.on_step_end(1, state) is False
    train(state, ckpt, 2, 2)
    assert guard.on_step_end(2, state) is True
    assert (guard.stopped_at, guard.final_saved, ckpt.latest().step) == (2, True, 2)
    assert time.monotonic() - guard.requested_at >= 1.0  # the notice's age counts


def test_run_control_counts_attempts_and_keeps_the_first_notice():
    control = RunControl()
    assert [control.start(0), control.start(1), control.restarts()] == [0, 0, 0]
    assert [control.start(1), control.start(0), control.restarts()] == [1, 1, 1]
    assert control.notice() is None
    control.preempt(10.0)
    control.preempt(20.0)
    assert control.notice() == 10.0
    control.finish({"ckpt_uri": "x"})
    assert control.final() == {"ckpt_uri": "x"}


class _Method:
    def __init__(self):
        self.calls = []

    def remote(self, *args):
        self.calls.append(args)


class _Control:
    def __init__(self):
        self.preempt = _Method()


def test_sigterm_relay_leaves_a_notice_then_restores_the_handler():
    control, lines = _Control(), []
    before = signal.getsignal(signal.SIGTERM)
    restore = relay_sigterm(control, lines.append)
    sent = time.time()
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 10
    while not control.preempt.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    restore()
    assert len(control.preempt.calls) == 1 and control.preempt.calls[0][0] >= sent - 1
    assert "final checkpoint" in lines[0]
    assert signal.getsignal(signal.SIGTERM) is before  # a second SIGTERM acts as usual


def test_sigterm_relay_without_a_signal_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    relay_sigterm(_Control(), print)()
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize(
    "counters, error, reported, want",
    [
        ({}, None, 0, {"ckpt_committed_step": -1, "ckpt_failures": 0}),
        ({"last_committed_step": 6}, None, 0, {"ckpt_committed_step": 6, "ckpt_failures": 0}),
        (
            {"saves_failed": 1, "last_committed_step": 3},
            "checkpoint x/step-6: write failed",
            0,
            {
                "ckpt_committed_step": 3,
                "ckpt_failures": 1,
                "ckpt_error": "checkpoint x/step-6: write failed",
            },
        ),
        ({"saves_failed": 1}, "old", 1, {"ckpt_committed_step": -1, "ckpt_failures": 1}),
    ],
)
def test_row_fields(counters, error, reported, want):
    assert row_fields({**new_counters(), **counters}, error, reported) == want


def test_listener_names():
    assert listener_name("evaluator") == "checkpoint-listener:evaluator"
    names = ["other", "checkpoint-listener:", "checkpoint-listener:b", "checkpoint-listener:a"]
    assert listener_names(names) == ["checkpoint-listener:a", "checkpoint-listener:b"]
    with pytest.raises(ValueError):
        listener_name("")
