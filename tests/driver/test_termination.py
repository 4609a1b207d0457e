"""A worker hears its own pod's termination (driver.trainer.signals), leaves the notice in
the run's channel (`terminating`, validated), and the ranks concerned see it through their
notice poll; under torchft its group leaves the quorum (driver.ft.leave)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from driver.channel import WORKER_METHODS, ChannelError
from driver.channel.state import NOTICE_MAX_AGE_S, RunControl, valid_time
from driver.channel.stops import NoticePoll
from driver.checkpoint.preemption import first_of
from driver.ft.leave import LeaveHook
from driver.train import main
from driver.trainer.signals import TerminationWatch, on_main_thread
from tests.driver.conftest import TINY_LM


def wait_for(check, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.fixture
def previous_handler():
    """A SIGTERM handler in place before the watch (as Ray's is in a worker): its calls."""
    calls = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    yield calls
    signal.signal(signal.SIGTERM, old)


def test_a_sigterm_is_heard_relayed_and_a_second_goes_to_the_previous_handler(
    previous_handler,
):
    told = []
    watch = TerminationWatch(on_term=told.append).start()
    try:
        assert watch.installed and watch.heard() is None
        before = time.time()
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(lambda: told)
        assert before <= watch.heard() <= time.time() and told == [watch.heard()]
        assert previous_handler == []  # the first signal is the watch's alone
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(lambda: previous_handler)
        assert previous_handler == [signal.SIGTERM] and len(told) == 1
    finally:
        watch.close()
    os.kill(os.getpid(), signal.SIGTERM)  # closed: the previous handler is back
    wait_for(lambda: len(previous_handler) == 2)


def test_close_without_a_signal_relays_nothing(previous_handler):
    told = []
    watch = TerminationWatch(on_term=told.append).start()
    watch.close()
    assert told == [] and watch.heard() is None
    os.kill(os.getpid(), signal.SIGTERM)
    wait_for(lambda: previous_handler)


def test_no_main_thread_to_reach_means_no_watch():
    """A thread of a plain process (no Ray actor to run the install): nothing installed."""
    got = []
    thread = threading.Thread(target=lambda: got.append(on_main_thread(lambda: True)))
    thread.start()
    thread.join()
    assert got == [False]
    assert not ray_started()  # asking started no Ray


def ray_started() -> bool:
    import ray

    return ray.is_initialized()


def test_terminating_is_a_worker_method_and_reaches_the_polls_of_its_ranks(channel, client):
    assert "terminating" in WORKER_METHODS
    at = time.time() - 2.0
    assert client.call("terminating", 3, at, timeout_s=10) is None
    assert channel.terminations() == {3: at}
    assert client.call("notice", timeout_s=10) == {"run": None, "pods": at}
    assert client.call("notice", [2, 3], timeout_s=10) == {"run": None, "pods": at}
    assert client.call("notice", [0, 1], timeout_s=10) == {"run": None, "pods": None}
    channel.preempt(at + 1)
    assert client.call("notice", [0], timeout_s=10) == {"run": at + 1, "pods": None}
    group, world = NoticePoll(client, 0.0, ranks=[2, 3]), NoticePoll(client, 0.0)
    wait_for(lambda: group.pods() == at and world.first() == at and group.run() == at + 1)


@pytest.mark.parametrize(
    "args, error",
    [
        ((True, 0.0), "rank: an integer"),
        ((-1, 0.0), "rank: an integer"),
        ((1 << 20, 0.0), "rank: an integer"),
        (("3", 0.0), "rank: an integer"),
        ((3, "now"), "at: a time"),
        ((3, float("nan")), "at: a time"),
        ((3, None), "at: a time"),
        ((3, 1.0), "at: more than 600 s ago"),
        ((3,), "TypeError"),
    ],
)
def test_terminating_refuses_what_is_not_a_rank_and_a_recent_time(channel, client, args, error):
    args = tuple(time.time() + a if isinstance(a, float) and a == 0.0 else a for a in args)
    with pytest.raises(ChannelError, match=error):
        client.call("terminating", *args, timeout_s=10)
    assert channel.terminations() == {}


def test_a_notice_asked_for_too_many_or_odd_ranks_is_refused(client):
    with pytest.raises(ChannelError, match="ranks"):
        client.call("notice", list(range(70000)), timeout_s=10)
    with pytest.raises(ChannelError, match="rank"):
        client.call("notice", ["x"], timeout_s=10)


def test_a_time_ahead_counts_as_now_and_the_first_per_rank_stays():
    now = 1000.0
    assert valid_time(now + 50, now=now) == now
    assert valid_time(now - NOTICE_MAX_AGE_S, now=now) == now - NOTICE_MAX_AGE_S
    control = RunControl()
    control.terminating(1, time.time() - 5)
    first = control.terminations()[1]
    control.terminating(1, time.time())
    assert control.terminations() == {1: first}


def test_a_termination_heard_before_the_ranks_newest_start_is_its_old_process():
    """Ray Train's teardown of a worker group (a restart, a replaced replica group) sends
    its workers SIGTERM: what they heard is no notice for the processes that replace them."""
    control = RunControl()
    control.start(0), control.start(1)
    time.sleep(0.01)
    control.terminating(1, time.time())  # rank 1's process heard a SIGTERM
    assert control.notice()["pods"] is not None and control.notice([1])["pods"] is not None
    time.sleep(0.01)
    control.start(0), control.start(1)  # the worker group started again
    assert control.notice() == {"run": None, "pods": None}
    assert control.notice([1]) == {"run": None, "pods": None}
    late = time.time() - 2  # the old process's message arriving after the new start
    control.terminating(1, late)
    assert control.notice([1])["pods"] is None
    now = time.time()
    control.terminating(1, now)  # the new process's own pod ending: a notice again
    assert control.notice([1])["pods"] == pytest.approx(now)
    assert control.terminations() == {1: pytest.approx(now)}


@pytest.mark.parametrize(
    "times, want",
    [((), None), ((None,), None), ((None, 5.0), 5.0), ((7.0, 5.0), 5.0), ((7.0, None), 7.0)],
)
def test_first_of_polls(times, want):
    polls = [(lambda t=t: t) for t in times]
    poll = first_of(*polls, None)
    assert (poll() if poll else None) == want


class _Ft:
    def __init__(self):
        self.left = False

    def leave(self):
        self.left = True


def test_the_leave_hook_leaves_once_the_groups_pod_is_ending():
    heard, pods = [None], [None]
    hook = LeaveHook(lambda: heard[0], lambda: pods[0], group=1)
    trainer = SimpleNamespace(stepper=SimpleNamespace(ft=_Ft()), finished_elsewhere=False)
    assert hook.should_stop(trainer, 4) is False and not trainer.stepper.ft.left
    pods[0] = time.time() - 0.5  # the driver's notice for a rank of this group
    assert hook.should_stop(trainer, 5) is True
    assert trainer.stepper.ft.left and trainer.finished_elsewhere and hook.left_at


def test_the_runs_stop_is_handed_to_the_guard_not_a_reason_to_leave():
    hook = LeaveHook(lambda: None, lambda: None, group=1)
    ft = _Ft()
    ft.run_stop_at = None
    trainer = SimpleNamespace(stepper=SimpleNamespace(ft=ft), finished_elsewhere=False)
    assert hook.should_stop(trainer, 3) is False and hook.run_stopped() is None
    ft.run_stop_at = 123.5  # the step's reduce carried the driver's notice
    assert hook.should_stop(trainer, 4) is False and hook.run_stopped() == 123.5
    assert not ft.left and not trainer.finished_elsewhere


@pytest.mark.parametrize(
    "rider, want",
    [
        ([0.0, 0.0], None),  # nobody heard
        ([1.0, 100.0], 100.0),  # one member of the live groups heard
        ([2.0, 200.0], 100.0),  # two heard the same notice: its time, not the sum
        ([], None),  # no reduce yet
        ([1.0, float("nan")], 500.0),  # a garbled time: still a stop, taken as now
        ([1.0, float("inf")], 500.0),
        ([1.0, 900.0], 500.0),  # ahead of this clock (skew): now, never later
    ],
)
def test_the_run_notice_rides_on_the_reduce(rider, want, monkeypatch):
    from driver.ft import replica
    from driver.ft.replica import FtReplica

    monkeypatch.setattr(replica.time, "time", lambda: 500.0)
    ft = FtReplica.__new__(FtReplica)
    ft.run_stop_at, ft._rider, ft.group = None, rider, 0
    ft.manager = SimpleNamespace(current_step=lambda: 7)
    ft._heard_run_stop()
    assert ft.run_stop_at == want


# ---- real processes: the driver, an embedded Ray, Ray Train workers --------------------


def rows_of(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def signalled_at(out, step: int, rank: int) -> float:
    """When debug.term_at_step sent its SIGTERM (the fault's marker holds the time)."""
    return float((out / ".faults" / f"term-{step}-{rank}").read_text())


def last_steps(out) -> dict[int, int]:
    """Rank -> the last step it committed (every rank's rows in the run's store)."""
    from observability.store import LocalStore

    with LocalStore.open(out, schema=False) as store:
        got = store.query("SELECT rank, max(step) AS last FROM platform.run_metrics "
                          "WHERE name = 'train/param_digest' GROUP BY rank")  # fmt: skip
    return {int(row["rank"]): int(row["last"]) for row in got}


FT_STEPS = 60


@pytest.mark.slow
def test_sigterm_to_one_member_makes_its_group_leave_and_the_other_goes_on(ray_local_4, tmp_path):
    """ft on, 2 replica groups of 2 workers (FSDP 2 inside each): SIGTERM to rank 3 before
    step 5's forward pass. Its group finishes the step, both members leave after the same
    step, and the other group trains on alone to the end: no step lost or run twice, no
    failed commit (nobody waited on a dead peer in a collective)."""
    out = tmp_path / "ft"
    code = main([TINY_LM, "ft=on", f"train.steps={FT_STEPS}", "train.micro_batch_size=8",
                 "parallelism.workers=4", "parallelism.replica_group_size=2",
                 "parallelism.fsdp_size=2", "run.local_cpus=4", "optimizer.warmup_steps=2",
                 "debug.digest=true", "logging.format=json", "debug.term_at_step=4",
                 "debug.kill_rank=3", f"run.output_dir={out}", "run.name=term-ft",
                 f"checkpoint.root={tmp_path / 'ckpt'}"])  # fmt: skip
    rows = rows_of(out)
    assert code == 0
    assert [r["step"] for r in rows] == list(range(1, FT_STEPS + 1))  # none lost, none twice
    assert rows[0]["ft_quorum_size"] == 2 and rows[-1]["ft_quorum_size"] == 1
    assert all(r["ft_failed_commits"] == 0 for r in rows)
    last = last_steps(out)
    assert last[2] == last[3] and 5 <= last[3] < FT_STEPS  # the group left as one
    assert last[0] == last[1] == FT_STEPS
    alone = next(r for r in rows if r["ft_quorum_size"] == 1)
    assert alone["step"] == last[3] + 1  # the very next step runs without it
    summary = json.loads((out / "summary.json").read_text())
    assert [p["rank"] for p in summary["pods_terminated"]] == [3]
    term = signalled_at(out, 4, 3)
    quorum = alone["time"] - alone["step_time"]  # the survivors' quorum without the group
    print(f"\nSIGTERM -> out of the quorum (ft, groups of 2): {quorum - term:.3f} s "
          f"(left after step {last[3]}; the next quorum formed without it)")  # fmt: skip


CKPT_STEPS = 30


def plain_run(tmp_path, name: str, *extra: str) -> tuple[int, object]:
    out = tmp_path / name
    code = main([TINY_LM, f"train.steps={CKPT_STEPS}", "optimizer.warmup_steps=2",
                 "data.size=1024", "logging.format=json", "checkpoint.interval_steps=1000",
                 "parallelism.workers=2",
                 "checkpoint.preemption_check_s=0.2", "run.team=t",
                 f"checkpoint.root={tmp_path / 'ckpt'}", f"run.output_dir={out}",
                 *extra])  # fmt: skip
    return code, out


@pytest.mark.slow
@pytest.mark.timeout(1200)  # three whole runs: beside two busy loops one's start took 150 s
def test_sigterm_to_a_worker_without_ft_commits_a_final_checkpoint_and_resumes_exactly(
    ray_local_4, tmp_path
):
    """ft off, 2 DDP workers: SIGTERM to rank 1 (not the driver, not rank 0) before step 5.
    The ranks agree, a final checkpoint of the step they stopped after commits within the
    budget, the run exits as preempted; the same run started again resumes there and its
    losses are an uninterrupted run's, bit for bit."""
    from driver.checkpoint.layout import MARKER
    from driver.train import PREEMPTED

    code, first = plain_run(tmp_path, "first", "run.name=term", "debug.term_at_step=4",
                            "debug.kill_rank=1")  # fmt: skip
    summary = json.loads((first / "summary.json").read_text())
    stopped = summary["preempted_at"]
    assert code == PREEMPTED and 5 <= stopped < CKPT_STEPS, summary
    assert summary["preempt_lost_steps"] == 0 and summary["stopped_by"].startswith(
        "SIGTERM to rank 1's pod"
    )
    final = tmp_path / "ckpt" / "t" / "term" / f"step-{stopped}"
    assert summary["ckpt_uri"] == str(final) and (final / MARKER).exists()
    committed = (final / MARKER).stat().st_mtime
    print(
        f"\nSIGTERM -> final checkpoint committed (ft off): "
        f"{committed - signalled_at(first, 4, 1):.3f} s (stopped after step {stopped})"
    )
    code, again = plain_run(tmp_path, "again", "run.name=term")
    assert code == 0
    code, ref = plain_run(tmp_path, "ref", "run.name=ref")
    assert code == 0
    want = [(r["step"], r["loss"]) for r in rows_of(ref)]
    got = [(r["step"], r["loss"]) for r in rows_of(first)] + [
        (r["step"], r["loss"]) for r in rows_of(again)
    ]
    assert got == want
