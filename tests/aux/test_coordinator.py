"""Coordinator planning as tables: placement-group bundles per service (CPU runs, one node,
several nodes), singletons, the shared-accelerator rule, proxies per node, IPC paths, and
agreement with the capacity planner's slot count."""

from __future__ import annotations

import pytest

from driver.aux.coordinator import proxy_groups, service_plan, worker_address
from driver.capacity import Service, plan, service_slots
from driver.config.schema import AuxServiceConfig


def svc(gpus=1.0, cpus=1.0, placement="SPREAD", **kw) -> AuxServiceConfig:
    return AuxServiceConfig(handler="driver.aux.services.encoder:EncoderHandler",
                            gpus_per_worker=gpus, cpus_per_worker=cpus, placement=placement,
                            **kw)  # fmt: skip


@pytest.mark.parametrize(
    ("case", "service", "replicas", "gpu", "multi", "bundles", "worker_bundle", "resources"),
    [
        ("cpu run: a GPU service's GPU stands for a CPU slot", svc(1.0, 8), 2, False, False,
         [{"CPU": 1.0}, {"CPU": 1.0}], [0, 1], {"CPU": 1.0}),
        ("cpu run: a CPU service takes its CPUs", svc(0.0, 0.5), 2, False, False,
         [{"CPU": 0.5}, {"CPU": 0.5}], [0, 1], {"CPU": 0.5}),
        ("one node: fractions reserved as they are (may share a GPU with others)",
         svc(0.5, 2), 3, True, False,
         [{"CPU": 2, "GPU": 0.5}] * 3, [0, 1, 2], {"CPU": 2, "GPU": 0.5}),
        ("several nodes: fractional workers packed into whole GPUs of their own",
         svc(0.5, 2), 3, True, True,
         [{"CPU": 4, "GPU": 1.0}, {"CPU": 2, "GPU": 1.0}], [0, 0, 1], {"CPU": 2, "GPU": 0.5}),
        ("several nodes: 0.4 packs two to a GPU", svc(0.4, 1), 5, True, True,
         [{"CPU": 2, "GPU": 1.0}] * 2 + [{"CPU": 1, "GPU": 1.0}], [0, 0, 1, 1, 2],
         {"CPU": 1, "GPU": 0.4}),
        ("several nodes: whole GPUs per worker", svc(1.0, 8), 2, True, True,
         [{"CPU": 8, "GPU": 1.0}] * 2, [0, 1], {"CPU": 8, "GPU": 1.0}),
        ("several nodes: 1.5 GPUs round up to 2", svc(1.5, 8), 1, True, True,
         [{"CPU": 8, "GPU": 2.0}], [0], {"CPU": 8, "GPU": 2.0}),
        ("a CPU-only service on a GPU run", svc(0.0, 4), 2, True, True,
         [{"CPU": 4}] * 2, [0, 1], {"CPU": 4}),
    ],
)  # fmt: skip
def test_bundles(case, service, replicas, gpu, multi, bundles, worker_bundle, resources):
    layout = service_plan("enc", service, replicas, gpu, multi)
    assert layout.bundles == bundles, case
    assert layout.worker_bundle == worker_bundle, case
    assert layout.resources == resources, case
    assert layout.strategy == "SPREAD"


def test_placement_strategy_is_the_services():
    assert service_plan("e", svc(placement="STRICT_PACK"), 2, True, False).strategy == "STRICT_PACK"


@pytest.mark.parametrize(
    ("gpus", "replicas", "nodes"),
    [(0.5, 3, 2), (0.4, 5, 2), (0.3, 4, 3), (1.0, 9, 4), (0.5, 1, 1), (0.25, 7, 1)],
)
def test_gpu_bundles_match_the_planners_slots(gpus, replicas, nodes):
    """What the coordinator reserves is what the capacity planner counted."""
    layout = service_plan("enc", svc(gpus), replicas, True, nodes > 1)
    reserved = sum(b.get("GPU", 0) for b in layout.bundles)
    planned = service_slots([Service("enc", gpus)], {"enc": replicas}, nodes)["enc"]
    assert reserved == pytest.approx(planned)


def test_singleton_gets_exactly_one_worker():
    services = [Service("enc", 1.0, 4), Service("eval", 1.0, min_replicas=3, singleton=True)]
    result = plan(2, 8, services)
    layout = service_plan("eval", svc(1.0, singleton=True), result.replicas["eval"], True, True)
    assert result.replicas["eval"] == 1 and len(layout.bundles) == 1


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (["a", "a"], {"a": [0, 1]}),
        (["a", "b", "a", "c"], {"a": [0, 2], "b": [1], "c": [3]}),
        ([], {}),
    ],
)
def test_one_proxy_per_node_with_that_nodes_workers(nodes, expected):
    assert proxy_groups(nodes) == expected


def test_worker_address_is_stable_and_short():
    first = worker_address("/tmp/aux-0123456789", "encoder", 3)
    assert first == worker_address("/tmp/aux-0123456789", "encoder", 3)
    assert first == "ipc:///tmp/aux-0123456789/encoder-3.sock" and len(first) < 100
