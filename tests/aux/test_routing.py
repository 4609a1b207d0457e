"""Routing and queueing decisions as pure functions: tables of weights, orders and queues."""

from __future__ import annotations

from collections import Counter

import pytest

from driver.aux.routing import (
    FairQueues,
    RoundRobin,
    SmoothWeightedRoundRobin,
    admit,
    link_weights,
    pick_worker,
    split_links,
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


@pytest.mark.parametrize(
    ("case", "local", "remote", "share", "weights"),
    [
        ("no worker here: the proxies' own weights", {}, {"p": 2, "q": 1}, 0.5,
         {"p": 2, "q": 1}),
        ("the node's worker is its share: all stay here", {"w": 1}, {"p": 1}, 0.5,
         {"w": 1, "p": 0}),
        ("more than its share: all stay here", {"w": 1, "v": 1}, {"p": 1}, 0.5,
         {"w": 1, "v": 1, "p": 0}),
        ("share unknown: all stay here", {"w": 1}, {"p": 3}, None, {"w": 1, "p": 0}),
        ("no proxy: all here", {"w": 1}, {}, 0.25, {"w": 1}),
        ("1 of 3 workers for half the ranks: keep 2/3", {"w": 1}, {"p": 2}, 0.5,
         {"w": 667, "p": 333}),
        ("all the ranks, half the workers: keep half", {"w": 1}, {"p": 1}, 1.0,
         {"w": 500, "p": 500}),
        ("the rest by the proxies' live workers", {"w": 1}, {"p": 2, "q": 1}, 1.0,
         {"w": 250, "p": 500, "q": 250}),
        ("the local worker is down: the proxies", {"w": 0}, {"p": 1}, 0.5, {"w": 0, "p": 1}),
        ("one of two local workers down", {"w": 1, "v": 0}, {"p": 1}, 1.0,
         {"w": 500, "v": 0, "p": 500}),
        ("a proxy with no live worker weighs 0", {"w": 1}, {"p": 0, "q": 1}, 1.0,
         {"w": 500, "p": 0, "q": 500}),
    ],
)  # fmt: skip
def test_link_weights_keep_a_nodes_calls_on_its_workers(case, local, remote, share, weights):
    assert link_weights(local, remote, share) == weights, case


def test_link_weights_share_the_load_evenly_over_workers():
    # 3 workers: 1 on node a, 2 on node b; 2 ranks on each node, each sending 600 requests
    a = SmoothWeightedRoundRobin(link_weights({"wa": 1}, {"pb": 2}, 0.5))
    b = SmoothWeightedRoundRobin(link_weights({"wb1": 1, "wb2": 1}, {"pa": 1}, 0.5))
    served = Counter()
    for _ in range(1200):
        served["wa" if a.next() == "wa" else "b"] += 1  # pb forwards to b's two workers
        served[b.next()] += 1
    per_b_worker = (served["b"] + served["wb1"] + served["wb2"]) / 2
    assert abs(served["wa"] - per_b_worker) / per_b_worker < 0.01


@pytest.mark.parametrize(
    ("here", "proxies", "workers"),
    [
        ("n0", {"tcp://b:2": 2}, ["ipc:///r/e-0.sock"]),
        ("n1", {"tcp://a:1": 1}, ["ipc:///r/e-1.sock", "ipc:///r/e-2.sock"]),
        ("n2", {"tcp://a:1": 1, "tcp://b:2": 2}, []),  # a node without workers: proxies
        (None, {"tcp://a:1": 1, "tcp://b:2": 2}, []),  # node unknown: proxies
    ],
)
def test_split_links_calls_its_own_nodes_workers_directly(here, proxies, workers):
    table = {"tcp://a:1": 1, "tcp://b:2": 2}
    nodes = {"tcp://a:1": "n0", "tcp://b:2": "n1"}
    endpoints = {"n0": ["ipc:///r/e-0.sock"], "n1": ["ipc:///r/e-1.sock", "ipc:///r/e-2.sock"]}
    assert split_links(table, nodes, endpoints, here) == (proxies, workers)
