"""The pieces the training driver adds around the Checkpointer: restart-aware resume, the
run's control state (RunControl), the SIGTERM/SIGINT relay, polled preemption notices,
listener names and the metrics fields (one process, no Ray)."""

from __future__ import annotations

import os
import resource
import signal
import time
from pathlib import Path

import pytest

from driver.aux.listeners import listener_name, listener_names
from driver.channel.state import RunControl
from driver.channel.stops import Interrupted, StopRelay
from driver.checkpoint import CheckpointConfig, PreemptionGuard
from driver.checkpoint.api import new_counters, row_fields
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


def test_an_agreed_notice_is_acted_on_at_its_step_not_the_next_scheduled_check(root, checkpointers):
    ckpt = checkpointers(config(root, interval_steps=100), "team", "run")
    agreed = [None, None, time.time()]  # every rank learns it after step 3
    guard = PreemptionGuard(ckpt, poll=lambda: None, agreed=lambda: agreed.pop(0))
    checks = []
    guard._distributed, guard._next_check = True, 50  # the next scheduled agreement: step 50
    guard._agree = lambda step, seen: checks.append(step) or seen
    guard._from_rank0 = lambda decision: decision
    state = make_state()
    for step in (1, 2):
        train(state, ckpt, step, step)
        assert guard.on_step_end(step, state) is False
    train(state, ckpt, 3, 3)
    assert guard.on_step_end(3, state) is True and checks == [3]
    assert (guard.stopped_at, guard.final_saved) == (3, True)


def test_run_control_counts_attempts_and_keeps_the_first_notice():
    control = RunControl()
    assert [control.start(0), control.start(1), control.restarts()] == [0, 0, 0]
    assert [control.start(1), control.start(0), control.restarts()] == [1, 1, 1]
    assert control.notice() == {"run": None, "pods": None}
    control.preempt(10.0)
    control.preempt(20.0)
    assert control.notice() == {"run": 10.0, "pods": None}
    control.finish({"ckpt_uri": "x"})
    assert control.final() == {"ckpt_uri": "x"}


class _Method:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


class _Control:
    def __init__(self):
        self.preempt = _Method()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_relay_leaves_a_notice_then_a_second_signal_acts_at_once(signum):
    control, lines = _Control(), []
    both = (signal.SIGTERM, signal.SIGINT)  # after a signal both keep their default action
    before = {each: signal.getsignal(each) for each in both}
    stops = StopRelay(lines.append).install()
    stops.attach(control)
    sent = time.time()
    os.kill(os.getpid(), signum)
    deadline = time.monotonic() + 10
    while not control.preempt.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert len(control.preempt.calls) == 1 and control.preempt.calls[0][0] >= sent - 1
        assert stops.name == signal.Signals(signum).name and "final checkpoint" in lines[0]
        assert signal.getsignal(signum) is signal.SIG_DFL  # a second signal stops at once
    finally:
        stops.restore()
        for each, handler in before.items():  # this test process keeps its own handlers
            signal.signal(each, handler)


def test_stop_relay_before_attach_or_without_checkpoints_interrupts():
    before = signal.getsignal(signal.SIGINT)
    stops = StopRelay(print).install()
    try:
        with pytest.raises(Interrupted) as caught:  # start-up: nothing to save
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert caught.value.signum == signal.SIGINT and str(caught.value) == "SIGINT"
    finally:
        stops.restore()
        signal.signal(signal.SIGINT, before)
    stops = StopRelay(print).install()
    stops.attach(None)  # no checkpoints: no worker listens
    try:
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    finally:
        stops.restore()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stop_relay_held_raises_only_as_the_block_ends(signum):
    """While Ray starts (`held`) a signal raises nothing; it interrupts right after, with
    the relay's handlers back even if the block replaced one (as Ray does for SIGTERM)."""
    before = signal.getsignal(signum)
    stops = StopRelay(print).install()
    reached = []
    try:
        with pytest.raises(Interrupted) as caught:
            with stops.held():
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # someone else's handler
                signal.signal(signal.SIGTERM, stops._handle)  # ... replaced again
                os.kill(os.getpid(), signum)
                time.sleep(0.5)  # the handler has run by now
                reached.append("end of block")
        assert reached == ["end of block"] and caught.value.signum == signum
    finally:
        stops.restore()
        signal.signal(signum, before)
    quiet = StopRelay(print).install()
    try:
        with quiet.held():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # replaced in the block ...
        assert quiet.signum is None  # no signal: nothing raised
        assert signal.getsignal(signal.SIGTERM) == quiet._handle  # ... and put back
    finally:
        quiet.restore()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_stop_relay_held_reports_the_signal_when_the_block_fails():
    before = signal.getsignal(signal.SIGINT)
    stops = StopRelay(print).install()
    try:
        with pytest.raises(Interrupted) as caught:
            with stops.held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)
                raise RuntimeError("ray.init failed after the signal")
        assert isinstance(caught.value.__cause__, RuntimeError)
    finally:
        stops.restore()
        signal.signal(signal.SIGINT, before)
    failing = StopRelay(print).install()
    try:
        with pytest.raises(RuntimeError):  # no signal: the block's own error
            with failing.held():
                raise RuntimeError("no signal")
    finally:
        failing.restore()
        signal.signal(signal.SIGINT, before)


def test_stop_relay_without_a_signal_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stops = StopRelay(print).install()
    stops.attach(_Control())
    stops.restore()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


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


def _refusing_from_step_2(session, steps: int, rows: list, each=None):
    """Train up to `steps` steps, the storage refusing every write from step 2 on (here
    RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC); `each(step)` first in every step, a
    row per step into `rows`. (The step the session stopped after or None, its figures.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    stopped = None
    try:
        for step in range(1, steps + 1):
            if each is not None:
                each(step)
            train(session.state, None, step, step)
            if step == 2:  # step 1 saved; from step 2 on the storage refuses every write
                resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
            rows.append({})
            session.after_step(step, rows[-1])
            if session.should_stop(step):
                stopped = step
                break
        return stopped, session.finish()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def _session(root: str, *overrides: str):
    from driver.checkpoint.session import CheckpointSession
    from driver.config.compose import compose

    tiny = str(Path(__file__).resolve().parents[2] / "runs/train/tiny-lm.yaml")
    sets = [f"checkpoint.root={root}", "checkpoint.interval_steps=1", "train.steps=10"]
    cfg, _ = compose(tiny, [*sets, "checkpoint.async_mode=sync", "run.team=t", *overrides])
    return CheckpointSession(cfg, make_state(), rank=0, world=1)


@pytest.mark.parametrize("limit, stops_after", [(2, 3), (0, None)])
def test_saves_failing_in_a_row_stop_the_run_after_max_failed_saves(root, limit, stops_after):
    """A refused write (here RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC) counts; after
    `checkpoint.max_failed_saves` in a row the session stops the loop and says why."""
    session = _session(root, f"checkpoint.max_failed_saves={limit}")
    rows = []
    stopped, final = _refusing_from_step_2(session, 5, rows)
    assert stopped == stops_after
    assert [r["ckpt_failures"] for r in rows][:3] == [0, 1, 2]
    assert "File too large" in rows[1]["ckpt_error"]
    assert final["ckpt_uri"].endswith("step-1")
    if limit:
        assert final["ckpt_stopped"].startswith("2 checkpoint saves in a row failed")
        assert "checkpoint.max_failed_saves=2" in final["ckpt_stopped"]
        assert "preempted_at" not in final
    else:
        assert "ckpt_stopped" not in final and final["ckpt_failures"] == 5  # 2-5 and the end


def test_under_ft_failing_saves_stop_every_group_through_the_reduce_not_the_writer_alone(root):
    """Under torchft only the writing group saves: its failing saves ride on the next
    step's reduce as the run's stop (driver.ft.leave.run_notice), so the writer does not
    stop alone after step 3; every group's guard gets the stop after step 4 (`agreed`),
    and the writer skips the final save and says why."""
    from driver.config.compose import compose
    from driver.ft.leave import run_notice
    from driver.ft.session import FtCheckpointSession

    tiny = str(Path(__file__).resolve().parents[2] / "runs/train/tiny-lm.yaml")
    sets = [f"checkpoint.root={root}", "checkpoint.interval_steps=1", "train.steps=10",
            "checkpoint.async_mode=sync", "run.team=t",
            "checkpoint.max_failed_saves=2"]  # fmt: skip
    cfg, _ = compose(tiny, sets)
    session = FtCheckpointSession(cfg, make_state(), group=0)
    rider = run_notice(None, session)
    agreed = [None]
    session.guard.agreed = lambda: agreed[0]  # one group: the reduce's sum is its own rider

    def reduce(step: int) -> None:  # the rider is sent in the step's reduce, heard after it
        agreed[0] = rider()

    stopped, final = _refusing_from_step_2(session, 6, [], each=reduce)
    assert stopped == 4  # failing after step 3's save; on the reduce of step 4
    assert not session.guard.final_saved and final["ckpt_uri"].endswith("step-1")
    assert final["ckpt_stopped"].startswith("3 checkpoint saves in a row failed")


@pytest.mark.parametrize(
    "notice, failing, want",
    [
        (None, None, None),
        (5.0, None, 5.0),
        (None, "saves failing", "now"),
        (5.0, "saves failing", 5.0),
    ],  # fmt: skip
)
def test_the_run_notice_a_member_sends_is_the_drivers_or_its_groups_failing_saves(
    notice, failing, want, monkeypatch
):
    from types import SimpleNamespace

    from driver.ft import leave

    monkeypatch.setattr(leave.time, "time", lambda: 77.0)
    notices = SimpleNamespace(run=lambda: notice)
    session = SimpleNamespace(failing=lambda: failing)
    assert leave.run_notice(notices, session)() == (77.0 if want == "now" else want)
    assert leave.run_notice(None, None)() is None


def test_max_failed_saves_must_be_a_count():
    with pytest.raises(Exception, match="checkpoint.max_failed_saves: must be an integer >= 0"):
        CheckpointConfig(max_failed_saves=-1)


def test_listeners_never_start_ray(root):
    """A commit outside Ray (a library user, a test) calls no listener and starts no Ray."""
    import sys

    from driver.aux.listeners import RayListeners

    RayListeners().on_checkpoint(3, f"{root}/step-3")
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()
