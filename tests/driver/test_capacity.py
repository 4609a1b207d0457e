"""Capacity planner tables: each rule, worked cases and a 10,000-GPU run."""

from __future__ import annotations

import pytest

from driver.capacity import CapacityError, Service, format_plan, plan

ENC = Service("encoder", 1.0, train_workers_per_worker=16)
EVAL = Service("evaluator", 1.0, singleton=True)
HALF_ENC = Service("encoder", 0.5, train_workers_per_worker=4)
HALF_EVAL = Service("evaluator", 0.5, singleton=True)


@pytest.mark.parametrize(
    ("case", "nodes", "slots", "services", "group", "cap", "world", "replicas", "svc_slots"),
    [
        # no services: every slot trains (a local CPU run: 1 node x 2 slots)
        ("local cpu", 1, 2, [], 1, 2, 2, {}, {}),
        # max_workers caps the world below capacity
        ("capped", 1, 8, [], 1, 3, 3, {}, {}),
        # singleton reserved first, the rest trains
        ("singleton", 1, 8, [EVAL], 1, None, 7, {"evaluator": 1}, {"evaluator": 1}),
        # proportional: 1 + 1/16 slots per trainer; 16 GPUs -> 15 trainers + 1 encoder
        ("proportional", 2, 8, [ENC], 1, None, 15, {"encoder": 1}, {"encoder": 1}),
        # single-node debug: encoder and evaluator halves share accelerators (pooled)
        ("shared 1 node", 1, 8, [HALF_ENC, HALF_EVAL], 1, None, 6,
         {"encoder": 2, "evaluator": 1}, {"encoder": 1.0, "evaluator": 0.5}),
        # multi-node: the evaluator's half GPU becomes a whole GPU of its own
        ("whole GPUs multi-node", 2, 8, [HALF_ENC, HALF_EVAL], 1, None, 13,
         {"encoder": 4, "evaluator": 1}, {"encoder": 2, "evaluator": 1}),
        # rounding to replica groups of 8: estimate 28 -> 24 (3 groups), 5 GPUs idle
        ("replica groups", 4, 8, [Service("encoder", 1.0, 8)], 8, None, 24,
         {"encoder": 3}, {"encoder": 3}),
        # min replicas: 4 encoders although 12 trainers need only 1; fix-up drops trainers
        ("min replicas", 2, 8, [Service("encoder", 1.0, 16, min_replicas=4)], 1, None, 12,
         {"encoder": 4}, {"encoder": 4}),
        # at least one whole GPU per service type on multi-node runs (quarter-GPU services)
        ("one GPU per type", 2, 8, [Service("a", 0.25), Service("b", 0.25)], 1, None, 14,
         {"a": 1, "b": 1}, {"a": 1, "b": 1}),
        # ... but the same two share one GPU on a single-node debug run
        ("shared types", 1, 8, [Service("a", 0.25), Service("b", 0.25)], 1, None, 7,
         {"a": 1, "b": 1}, {"a": 0.25, "b": 0.25}),
        # CPU-only services take no GPU
        ("cpu service", 2, 8, [Service("feeder", 0.0, 4)], 1, None, 16,
         {"feeder": 4}, {"feeder": 0.0}),
        # 10,000 GPUs: 1,250 nodes x 8, FSDP groups of 8, an encoder per 16, one evaluator
        ("10k GPUs", 1250, 8, [ENC, EVAL], 8, None, 9408,
         {"encoder": 588, "evaluator": 1}, {"encoder": 588, "evaluator": 1}),
    ],
)  # fmt: skip
def test_plan(case, nodes, slots, services, group, cap, world, replicas, svc_slots):
    result = plan(nodes, slots, services, group_size=group, max_workers=cap)
    assert result.world_size == world, case
    assert result.world_size % group == 0
    assert result.replicas == replicas
    assert result.service_slots == pytest.approx(svc_slots)
    assert result.idle_slots >= 0


def test_10k_plan_fits_and_wastes_under_a_group():
    result = plan(1250, 8, [ENC, EVAL], group_size=8)
    assert result.total_slots == 10_000
    assert 0 <= result.idle_slots < 8 + 1


@pytest.mark.parametrize(
    ("nodes", "slots", "services", "group"),
    [
        (1, 1, [EVAL], 1),  # the evaluator takes the only GPU
        (1, 8, [], 16),  # a replica group larger than the cluster
        (0, 8, [], 1),  # no nodes
    ],
)
def test_no_room_is_an_error(nodes, slots, services, group):
    with pytest.raises(CapacityError):
        plan(nodes, slots, services, group_size=group)


def test_table_lists_every_role():
    text = format_plan(plan(1250, 8, [ENC, EVAL], group_size=8))
    lines = text.splitlines()
    assert lines[0].startswith("capacity: 1250 nodes x 8 slots = 10000")
    assert [line.split()[0] for line in lines[2:]] == ["training", "encoder", "evaluator", "idle"]
    assert lines[2].split()[1] == "9408"


def test_command_prints_the_10k_table_and_rejects_bad_input(capsys):
    from driver.capacity import main

    assert main([]) == 0
    assert "training   9408" in capsys.readouterr().out
    assert main(["1", "1"]) == 2  # the evaluator takes the only GPU
    assert main(["x"]) == 2
    err = capsys.readouterr().err
    assert "no training group" in err and "usage:" in err
