"""When a missing replica group is lost, not late (driver.ft.lost): the rule as a table, the
lowest live group's bookkeeping quorum by quorum, the pods the run's channel names, and the
whole path to the KubeRay fake: a straggler left out of quorums never deletes a pod; a lost
group's pod, and only it, is deleted."""

from __future__ import annotations

import pytest

from driver.channel.state import RunChannel, dead_pods, exclusive_pods
from driver.config.ft import FtConfig
from driver.ft.lost import LATE, LOST, PRESENT, LossRule, ShrinkDecider, rule_of, verdict
from driver.ft.shrink import ShrinkRequest, ShrinkTarget, warden_shrink

RULE = LossRule(quorums=3, seconds=60.0)


@pytest.mark.parametrize(
    ("quorums", "seconds", "dead", "expected"),
    [
        (0, 0.0, False, PRESENT),
        (0, 999.0, True, PRESENT),
        (1, 999.0, True, LATE),  # a straggler left out of one quorum: never a shrink
        (2, 999.0, True, LATE),
        (3, 0.0, True, LOST),  # its pods are dead
        (3, 59.9, False, LATE),  # missing a while, pods alive: a replacement still starting
        (3, 60.0, False, LOST),
        (50, 1.0, False, LATE),  # short steps: many quorums, little time
    ],
)
def test_verdict(quorums, seconds, dead, expected):
    assert verdict(quorums, seconds, dead, RULE) == expected


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def decider(pods: dict[int, str], dead: set[str], groups: int = 4, **kwargs):
    """One worker per group, group g's rank g on pod `pods[g]`; `dead`: pods the driver
    sees dead. The calls to the channel are recorded."""
    hosts = {rank: {"pod": pod} for rank, pod in pods.items()}
    asked: list[list[int]] = []

    def pods_of(ranks):
        asked.append(list(ranks))
        return {p: p in dead for p in exclusive_pods(hosts, list(ranks))}

    clock = Clock()
    made = ShrinkDecider(groups, lambda g: [g], pods_of, RULE, clock, **kwargs)
    return made, clock, asked


def run(made, clock, quorums, step_s: float = 1.0):
    """Feed quorums (lists of live groups), `step_s` apart; the requests made."""
    out = []
    for live in quorums:
        clock.now += step_s
        out.append(made.quorum(live))
    return out


PODS = {0: "w-0", 1: "w-1", 2: "w-2", 3: "w-3"}


def test_a_straggler_left_out_of_quorums_never_triggers_a_shrink():
    made, clock, asked = decider(PODS, dead=set())
    out = run(made, clock, [[0, 1, 2, 3], [0, 1, 3], [0, 1, 2, 3], [0, 1, 3], [0, 1, 3],
                            [0, 1, 2, 3]] * 5)  # fmt: skip
    assert out == [None] * len(out) and asked == []


def test_a_group_whose_pod_died_is_lost_after_enough_quorums_and_asked_once():
    made, clock, asked = decider(PODS, dead={"w-2"})
    out = run(made, clock, [[0, 1, 2, 3]] + [[0, 1, 3]] * 6)
    assert out[:3] == [None] * 3
    assert out[3] == ShrinkRequest(4, 3, (2,), ("w-2",))
    assert out[4:] == [None] * 3  # asked once
    assert asked == [[2], [2]]  # whether it is dead, then its pods for the request


def test_a_missing_group_with_a_live_pod_waits_for_the_time_rule():
    made, clock, _ = decider(PODS, dead=set())
    out = run(made, clock, [[0, 1, 3]] * 80)  # a quorum a second
    first = next(i for i, r in enumerate(out) if r is not None)
    assert first == 60  # 60 s after the first quorum without it (and 3 quorums)
    assert out[first] == ShrinkRequest(4, 3, (2,), ("w-2",))


def test_a_group_that_returns_is_tracked_afresh_and_a_second_loss_counts_from_the_first():
    made, clock, _ = decider(PODS, dead={"w-2", "w-3"})
    out = run(made, clock, [[0, 1, 3]] * 3 + [[0, 1]] * 3)
    assert [r for r in out if r] == [ShrinkRequest(4, 3, (2,), ("w-2",)),
                                     ShrinkRequest(3, 2, (3,), ("w-3",))]  # fmt: skip
    out = run(made, clock, [[0, 1, 2, 3]] + [[0, 1, 3]] * 3)  # grown back, then lost again
    assert [r for r in out if r] == [ShrinkRequest(4, 3, (2,), ("w-2",))]


def test_groups_that_share_a_pod_name_no_pod():
    shared = {0: "w-0", 1: "w-0", 2: "w-1", 3: "w-1"}
    made, clock, _ = decider(shared, dead=set())
    out = run(made, clock, [[0, 1, 3]] * 61)
    assert [r for r in out if r] == [ShrinkRequest(4, 3, (2,), ())]


def test_no_channel_answer_names_no_pod():
    made = ShrinkDecider(2, lambda g: [g], lambda ranks: 1 / 0, RULE, Clock())
    made.clock.now = 0.0
    requests = []
    for _ in range(70):
        made.clock.now += 1.0
        requests.append(made.quorum([0]))
    assert [r for r in requests if r] == [ShrinkRequest(2, 1, (1,), ())]


def test_rule_from_the_config_and_its_checks():
    assert rule_of(FtConfig(shrink_after_quorums=5, shrink_after_s=9)) == LossRule(5, 9.0)
    with pytest.raises(Exception, match="ft.shrink_after_quorums"):
        FtConfig(shrink_after_quorums=0).validate("run.yaml")


@pytest.mark.parametrize(
    ("hosts", "ranks", "expected"),
    [
        ({0: {"pod": "a"}, 1: {"pod": "b"}}, [1], ["b"]),
        ({0: {"pod": "a"}, 1: {"pod": "a"}}, [1], []),  # a also hosts rank 0
        ({0: {"pod": "a"}, 1: {"pod": "a"}, 2: {"pod": "b"}}, [0, 1], ["a"]),
        ({0: {"pod": "a"}, 1: {}}, [1], []),
    ],
)
def test_exclusive_pods(hosts, ranks, expected):
    assert exclusive_pods(hosts, ranks) == expected


def test_dead_pods_from_ray_nodes():
    nodes = [
        {"NodeManagerHostname": "a", "Alive": False},
        {"NodeManagerHostname": "b", "Alive": False},
        {"NodeManagerHostname": "b", "Alive": True},  # its raylet came back
        {"NodeManagerHostname": "c", "Alive": True},
    ]
    assert dead_pods(nodes) == {"a"}


def test_pods_of_through_the_runs_channel():
    from driver.channel import DriverChannel

    state = RunChannel()
    state.dead_pods = lambda: {"w-1"}
    channel = DriverChannel.start(state)
    client = channel.address.connect(rank=0)
    try:
        for rank, pod in {0: "w-0", 1: "w-1", 2: "w-1", 3: "w-2"}.items():
            client.call("hello", rank, {"pod": pod, "node": "n"})
        assert client.call("pods_of", [1, 2]) == {"w-1": True}
        assert client.call("pods_of", [3]) == {"w-2": False}
        assert client.call("pods_of", [1]) == {}
    finally:
        client.close()
        channel.close()


def test_through_warden_to_kuberay_a_straggler_deletes_nothing_a_lost_group_its_pod():
    from tests.warden.test_kuberay import GROUP, NAME, NS, cluster_of_four, fail_node, live
    from warden.model import ShrinkInput

    fleet, acts, kuberay, names = cluster_of_four(seed=5)
    pods = dict(enumerate(names))
    target = ShrinkTarget(NS, NAME, GROUP, workers_per_group=1, workers_per_pod=1)
    shrink = warden_shrink(target, lambda **kw: acts.shrink(ShrinkInput(**kw)))
    made, clock, _ = decider(pods, dead={names[2]})
    straggling = [[0, 1, 2, 3], [0, 2, 3], [0, 1, 2, 3], [0, 2, 3], [0, 2, 3], [0, 1, 2, 3]]
    for request in run(made, clock, straggling * 4):
        assert request is None
        kuberay.reconcile()
    assert live(fleet) == set(names)
    fail_node(fleet, 2)
    for request in run(made, clock, [[0, 1, 3]] * 4):
        if request is not None:
            shrink(request)
        kuberay.reconcile()
    assert live(fleet) == set(names) - {names[2]}
    assert fleet.counts("kuberay-delete") == {f"{NS}/{names[2]}": 1}


def test_a_group_that_is_not_asking_keeps_count_and_asks_nothing():
    made, clock, asked = decider(PODS, dead={"w-2"})
    for _ in range(5):
        clock.now += 1.0
        assert made.quorum([0, 1, 3], asking=False) is None
    assert asked == [] and made.missing[2].quorums == 5
    clock.now += 1.0  # it becomes the lowest live group: it knows how long 2 is missing
    assert made.quorum([1, 3]) == ShrinkRequest(4, 3, (2,), ("w-2",))  # 0 is only late
