"""The shrink request the lowest live group sends (driver.ft.shrink), with a fake starter
that records the ShrinkInput fields Warden's ShrinkWorkflow takes."""

from __future__ import annotations

import dataclasses

import pytest

from driver.ft.shrink import ShrinkRequest, ShrinkTarget, local_shrink, warden_shrink
from warden.model import ShrinkInput


@pytest.mark.parametrize(
    ("before", "after", "per_group", "per_pod", "expected"),
    [(4, 3, 1, 1, (4, 3)), (4, 3, 8, 8, (4, 3)), (4, 2, 2, 8, (1, 1)), (6, 5, 4, 8, (3, 3))],
)
def test_replicas(before, after, per_group, per_pod, expected):
    assert ShrinkRequest(before, after).replicas(per_group, per_pod) == expected


def test_warden_shrink_sends_shrink_input_fields():
    sent = []
    target = ShrinkTarget("research", "tiny-lm", "h100", workers_per_group=1, workers_per_pod=1)
    warden_shrink(target, lambda **kw: sent.append(kw))(ShrinkRequest(4, 3))
    warden_shrink(target, lambda **kw: sent.append(kw))(ShrinkRequest(4, 3, (2,), ("lm-w-2",)))
    base = dict(namespace="research", name="tiny-lm", group="h100", replicas_from=4)
    assert sent == [base | dict(replicas_to=3, pods=[]),
                    base | dict(replicas_to=3, pods=["lm-w-2"])]  # fmt: skip
    assert set(sent[0]) == {f.name for f in dataclasses.fields(ShrinkInput)}
    ShrinkInput(**sent[0])


@pytest.mark.parametrize(
    ("request_", "per_group", "per_pod", "expected"),
    [  # with the lost pods named, the pods after are the pods before less those
        (ShrinkRequest(4, 2, (1, 2), ("p1", "p2")), 8, 8, (4, 2)),
        (ShrinkRequest(4, 3, (1,), ("p1", "p1")), 2, 1, (8, 7)),
        (ShrinkRequest(16, 15, (3,), ()), 1, 8, (2, 2)),
    ],
)
def test_replicas_with_named_pods(request_, per_group, per_pod, expected):
    assert request_.replicas(per_group, per_pod) == expected


def test_no_shrink_when_pods_stay_and_local_is_a_no_op(caplog):
    sent = []
    target = ShrinkTarget("ns", "run", "cpu", workers_per_group=1, workers_per_pod=8)
    warden_shrink(target, lambda **kw: sent.append(kw))(ShrinkRequest(8, 7))
    assert sent == []
    local_shrink(ShrinkRequest(3, 2))


def replica(position_calls: list, cfg=None):
    """An FtReplica without a Manager: only the quorum bookkeeping is exercised."""
    import threading

    from driver.config.ft import FtConfig
    from driver.ft.replica import FtReplica

    done = threading.Event()
    ft = FtReplica.__new__(FtReplica)
    ft.cfg, ft.start_groups, ft._last_live = cfg or FtConfig(enabled=True), 4, None
    ft.counters = {"ft_quorum_size": 0, "ft_failures_survived": 0}
    ft.manager = type("M", (), {"current_step": lambda self: 7})()
    ft.shrink = lambda request: (position_calls.append(request), done.set())
    ft.decider = None
    return ft, done


@pytest.mark.parametrize(("position", "asks"), [(0, True), (1, False)])
def test_the_lowest_live_group_asks_once_per_drop(position, asks):
    calls: list = []
    ft, done = replica(calls)
    for live in (4, 4, 3, 3):
        ft._note_quorum(live, position, tuple(range(live)))
    done.wait(5 if asks else 0.2)
    assert calls == ([ShrinkRequest(4, 3)] if asks else [])
    assert ft.counters["ft_failures_survived"] == 1 and ft.counters["ft_quorum_size"] == 3


def test_with_the_decider_a_late_group_is_no_shrink_and_a_lost_one_is_named():
    """The replica feeds driver.ft.lost's decider every quorum: one quorum without group 2
    asks nothing (late); the third in a row, its pods dead, asks once, naming its pods."""
    from driver.ft.lost import LossRule, ShrinkDecider

    calls: list = []
    ft, done = replica(calls)
    ranks = {2: [2]}
    dead = {"pod-2": True}
    ft.decider = ShrinkDecider(4, lambda g: ranks.get(g, [g]), lambda r: dead, LossRule(3, 120.0))
    ft._note_quorum(4, 0, (0, 1, 2, 3))
    for _ in range(2):
        ft._note_quorum(3, 0, (0, 1, 3))
    assert not done.wait(0.2) and calls == []  # late: two quorums only
    ft._note_quorum(3, 0, (0, 1, 3))
    done.wait(5)
    assert calls == [ShrinkRequest(4, 3, (2,), ("pod-2",))]
