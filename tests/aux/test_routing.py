"""Routing and queueing decisions as pure functions: tables of weights, orders and queues."""

from __future__ import annotations

from collections import Counter

import pytest

from driver.aux.routing import (
    FairQueues,
    RoundRobin,
    SmoothWeightedRoundRobin,
    admit,
    pick_worker,
)


@pytest.mark.parametrize(
    ("weights", "order"),
    [
        ({"a": 1, "b": 1}, "abab"),
        ({"a": 2, "b": 1}, "abaaba"),
        ({"a": 5, "b": 1, "c": 1}, "aabacaa"),
        ({"a": 0, "b": 3}, "bbb"),
        ({"a": 3, "b": 0, "c": 1}, "aaca"),
    ],
)
def test_smooth_wrr_interleaves_and_skips_zero(weights, order):
    wrr = SmoothWeightedRoundRobin(weights)
    assert "".join(wrr.next() for _ in order) == order


def test_smooth_wrr_shares_follow_weights_and_changes():
    wrr = SmoothWeightedRoundRobin({"a": 4, "b": 2, "c": 1})
    assert Counter(wrr.next() for _ in range(700)) == {"a": 400, "b": 200, "c": 100}
    wrr.set_weight("a", 0)  # a proxy that died
    assert set(wrr.next() for _ in range(30)) == {"b", "c"}
    wrr.set_weight("a", 1)  # ... and came back
    assert "a" in {wrr.next() for _ in range(4)}


def test_smooth_wrr_with_nothing_live_and_exclusions():
    assert SmoothWeightedRoundRobin({"a": 0}).next() is None
    assert SmoothWeightedRoundRobin().next() is None
    wrr = SmoothWeightedRoundRobin({"a": 5, "b": 1})
    assert [wrr.next(exclude={"a"}) for _ in range(3)] == ["b", "b", "b"]
    assert wrr.next(exclude={"a", "b"}) is None


def test_round_robin_over_workers_skips_excluded():
    rr = RoundRobin(["w0", "w1", "w2"])
    assert [rr.next() for _ in range(4)] == ["w0", "w1", "w2", "w0"]
    assert [rr.next(exclude={"w2"}) for _ in range(3)] == ["w1", "w0", "w1"]
    assert rr.next(exclude={"w0", "w1", "w2"}) is None
    assert RoundRobin().next() is None


@pytest.mark.parametrize(
    ("inflight", "skew", "picks"),
    [
        ({"w0": 0, "w1": 0, "w2": 0}, 4, ["w0", "w1", "w2", "w0"]),
        ({"w0": 9, "w1": 3, "w2": 5}, 4, ["w1", "w2", "w1", "w2"]),  # w0 fell behind
        ({"w0": 9, "w1": 3, "w2": 5}, 10, ["w0", "w1", "w2", "w0"]),
        ({"w1": 2}, 0, ["w1", "w1"]),  # only w1 live
        ({}, 4, [None]),
    ],
)
def test_proxy_picks_round_robin_skipping_a_worker_behind(inflight, skew, picks):
    rr = RoundRobin(["w0", "w1", "w2"])
    assert [pick_worker(rr, inflight, skew) for _ in picks] == picks


def test_fair_queues_serve_ranks_in_turn_not_arrival_order():
    queues = FairQueues(bound=10)
    for i in range(6):  # rank 0 floods first
        queues.push(0, f"r0-{i}")
    queues.push(1, "r1-0")
    queues.push(2, "r2-0")
    queues.push(1, "r1-1")
    order = [queues.pop()[1] for _ in range(len(queues))]
    assert order == ["r0-0", "r1-0", "r2-0", "r0-1", "r1-1", "r0-2", "r0-3", "r0-4", "r0-5"]
    assert queues.pop() is None and len(queues) == 0


def test_fair_queues_bound_is_per_rank():
    queues = FairQueues(bound=2)
    assert queues.push(0, "a") and queues.push(0, "b")
    assert not queues.push(0, "c") and queues.full(0) and queues.depth(0) == 2
    assert queues.push(1, "x") and not queues.full(1)
    queues.pop()
    assert not queues.full(0) and queues.push(0, "c")


def test_fair_queues_remove_keeps_order_and_ring():
    queues = FairQueues(bound=5)
    for item in (1, 2, 3):
        queues.push(7, item)
    queues.push(8, 9)
    assert queues.remove(7, lambda item: item == 2) == [2]
    assert queues.remove(8, lambda item: True) == [9] and queues.depth(8) == 0
    assert [queues.pop() for _ in range(2)] == [(7, 1), (7, 3)] and queues.pop() is None
    with pytest.raises(ValueError):
        FairQueues(0)


@pytest.mark.parametrize(
    ("full", "policy", "now", "deadline", "decision"),
    [
        (False, "wait", 0, 1, "accept"),
        (False, "fail_fast", 0, 1, "accept"),
        (True, "wait", 0, 1, "hold"),
        (True, "fail_fast", 0, 1, "refuse"),
        (False, "wait", 2, 1, "expire"),
        (True, "fail_fast", 1, 1, "expire"),
    ],
)
def test_back_pressure_decision(full, policy, now, deadline, decision):
    assert admit(full, policy, now, deadline) == decision


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="policy 'drop'"):
        admit(False, "drop", 0, 1)
