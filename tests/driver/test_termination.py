"""A worker hears its own pod's termination (driver.trainer.signals), leaves the notice in
the run's channel (`terminating`, validated), and the ranks concerned see it through their
notice poll; under torchft its group leaves the quorum (driver.ft.leave)."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from driver.channel import WORKER_METHODS, ChannelError, DriverChannel, RunChannel
from driver.channel.state import NOTICE_MAX_AGE_S, RunControl, valid_time
from driver.channel.stops import NoticePoll
from driver.checkpoint.preemption import first_of
from driver.ft.leave import LeaveHook
from driver.trainer.signals import TerminationWatch, on_main_thread


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


@pytest.fixture
def channel():
    served = DriverChannel.start(RunChannel())
    yield served
    served.close()


@pytest.fixture
def client(channel):
    worker = channel.address.connect(3)
    yield worker
    worker.close()


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
