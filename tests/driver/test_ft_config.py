"""The `ft` group at composition, the ft parts of the driver that need no processes: the
layout checks, the planned topology, the slot plan, the shrink target from the pod
environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.errors import InputError
from driver.config.compose import compose, group_overrides
from driver.ft.shrink import ShrinkRequest

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "runs/train/tiny-lm.yaml")
TINY_FT = str(ROOT / "runs/train/tiny-lm-ft.yaml")


@pytest.mark.parametrize(
    ("path", "overrides", "enabled"),
    [
        (TINY, [], False),
        (TINY, ["ft=on"], True),
        (TINY, ["ft=off"], False),
        (TINY, ["ft.enabled=true"], True),
        (TINY_FT, [], True),
        (TINY_FT, ["ft=off"], False),
    ],
)
def test_ft_group_composes_off_by_default(path, overrides, enabled):
    cfg, text = compose(path, overrides)
    assert cfg.ft.enabled is enabled
    assert "ft:" in text
    if enabled:
        assert cfg.ft.heartbeat_timeout_ms == 500 and cfg.ft.min_replicas == 1


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        (
            ["parallelism.workers=2", "ft.min_replicas=3"],
            "ft.min_replicas",
            "2 replica groups are fewer than ft.min_replicas=3",
        ),
        (
            ["parallelism.workers=4", "parallelism.replica_group_size=4", "ft.min_replicas=2"],
            "ft.min_replicas",
            "1 replica groups are fewer than ft.min_replicas=2",
        ),
        (["ft.heartbeat_interval_ms=900"], "ft.heartbeat_interval_ms", "heartbeat_timeout_ms"),
        (["ft.lr_scaling=sqrt"], "ft.lr_scaling", "linear"),
    ],
)
def test_ft_layouts_and_values_refused_in_one_line(overrides, field, words):
    with pytest.raises(InputError) as err:
        compose(TINY_FT, overrides)
    text = str(err.value)
    assert err.value.field == field and words in text and "\n" not in text
    assert "tiny-lm-ft.yaml" in text


def test_fsdp_without_ft_still_composes():
    cfg, _ = compose(TINY, ["parallelism.fsdp_size=2"])
    assert not cfg.ft.enabled


@pytest.mark.parametrize(
    ("defaults", "overrides", "expected"),
    [
        ("[train_schema]", ["ft=on", "train.steps=3"], ["+ft=on", "train.steps=3"]),
        ("[train_schema, {ft: 'off'}]", ["ft=on"], ["ft=on"]),
        ("[train_schema]", ["+ft=on", "ft.enabled=true"], ["+ft=on", "ft.enabled=true"]),
    ],
)
def test_ft_override_adds_the_group_when_the_run_lists_none(
    tmp_path, defaults, overrides, expected
):
    run = tmp_path / "run.yaml"
    run.write_text(f"defaults: {defaults}\n")
    assert group_overrides(run, overrides) == expected


def test_plan_topology_is_the_parallel_topology():
    from driver.capacity import Plan
    from driver.parallel import Topology

    plan = Plan(nodes=2, slots_per_node=4, world_size=8, group_size=4)
    topo = plan.topology(shard_size=2)
    assert topo == Topology(8, 2, 4)
    assert (topo.groups, topo.group_of(5), topo.lowest_rank(1)) == (2, 1, 4)
    assert Plan(1, 2, 2, 1).topology().groups == 2


def test_planned_groups_below_min_replicas_refused():
    from types import SimpleNamespace

    from driver.config.ft import FtConfig
    from driver.ft.launch import check_world

    cfg = SimpleNamespace(ft=FtConfig(enabled=True, min_replicas=3))
    check_world(cfg, 3)
    with pytest.raises(InputError, match="2 replica groups planned, fewer than"):
        check_world(cfg, 2)


def test_what_a_step_consumes_does_not_depend_on_which_groups_are_live():
    from driver.ft.batch import plan_step

    full = {s for g, slots in plan_step([0, 1], 2, 2).items() for s in slots}
    degraded = {s for g, slots in plan_step([1], 2, 2).items() for s in slots}
    assert full == degraded == {0, 1, 2, 3}
    assert plan_step([1], 2, 2) == {1: (2, 3, 0, 1)}  # its own slots first


POD = {"POD_NAMESPACE": "research", "RAY_WORKER_GROUP": "h200"}


@pytest.mark.parametrize(
    ("env", "has_target"),
    [
        (
            {"POD_NAMESPACE": "research", "RAY_CLUSTER": "lm-x7", "RAY_WORKER_GROUP": "h200"},
            True,
        ),
        ({"POD_NAMESPACE": "research", "RAY_WORKER_GROUP": "h200"}, False),
        ({}, False),
    ],
)
def test_shrink_target_from_the_pod_environment(env, has_target):
    from driver.ft.target import shrink_from_env, target_from_env

    target = target_from_env(env, workers_per_pod=8)
    assert (target is not None) is has_target
    if target:
        assert (target.namespace, target.name, target.group) == ("research", "lm-x7", "h200")
        assert target.workers_per_pod == 8 and target.workers_per_group == 1
        grouped = target_from_env(env, workers_per_pod=8, workers_per_group=8)
        assert grouped.workers_per_group == 8  # one group a pod: one lost group, one pod
        assert ShrinkRequest(2, 1, (1,), ("w-1",)).replicas(
            grouped.workers_per_group, grouped.workers_per_pod
        ) == (2, 1)
    assert shrink_from_env(env) is None  # no WARDEN_URL: the local, logged no-op
    warden = shrink_from_env({**env, "WARDEN_URL": "http://warden-gateway.warden.svc:8080"})
    assert (warden is not None) is has_target


def test_aux_services_compose_under_ft():
    cfg, _ = compose(str(ROOT / "runs/train/tiny-dit.yaml"), ["ft=on"])
    assert cfg.ft.enabled and set(cfg.aux.services) == {"encoder", "evaluator"}
    assert cfg.aux.refresh.service == "evaluator"  # each live group's writer refreshes
