"""Shrink and grow that KubeRay gets right: the plans Warden writes (tables), and what the
KubeRay fake (warden.fakeray, KubeRay v1.6.2's reconcile rules) does with them. A shrink
after a lost replica group deletes exactly that group's pods and never a healthy pod; a
grow re-creates them once capacity is back; a count-only shrink (what Warden wrote before)
lets KubeRay pick a healthy pod."""

from __future__ import annotations

import pytest

from catalog import labels
from tests.warden.conftest import settings
from warden.activities import WardenActivities
from warden.annotations import SHRUNK
from warden.fakefleet import FakeCluster
from warden.fakeray import FakeKubeRay, desired
from warden.kuberay import PodView, ScalePlan, grow_plan, shrink_plan
from warden.model import GrowInput, ShrinkInput, Timings
from warden.telemetry import MemorySink

NS, NAME, GROUP = "research", "lm-x7k2p", "h200"
SELECTOR = {labels.GKE_ACCELERATOR: "nvidia-h200-141gb"}
R, P, F, U = "Running", "Pending", "Failed", "Unknown"


def pods(*specs: str) -> list[PodView]:
    """`a`: running; `b:Pending`; `c:Running:t` (terminating)."""
    out = []
    for spec in specs:
        name, _, rest = spec.partition(":")
        phase, _, term = (rest or R).partition(":")
        out.append(PodView(name, phase, bool(term)))
    return out


def group(replicas: int, minimum: int | None = None, stale: list[str] | None = None) -> dict:
    spec = {"groupName": GROUP, "replicas": replicas, "maxReplicas": replicas}
    if minimum is not None:
        spec["minReplicas"] = minimum
    if stale:
        spec["scaleStrategy"] = {"workersToDelete": stale}
    return spec


@pytest.mark.parametrize(
    ("spec", "listed", "target", "named", "expected"),
    [
        # the lost pod is still listed (a dead node's pod stays Running or Unknown): named
        (group(3, 3), pods("a", "b", "c"), 2, ["c"], ScalePlan(3, 2, 2, ("c",))),
        (group(3, 3), pods("a", "b", "c:Unknown"), 2, ["c"], ScalePlan(3, 2, 2, ("c",))),
        (group(3), pods("a", "b", "c:Running:t"), 2, ["c"], ScalePlan(3, 2, None, ("c",))),
        # gone, and KubeRay made a replacement that waits for a node: the replacement goes
        (group(3, 3), pods("a", "b", "d:Pending"), 2, ["c"], ScalePlan(3, 2, 2, ("d",), ("c",))),
        # gone, no replacement yet: lower replicas, name nothing (KubeRay has nothing to pick)
        (group(3, 3), pods("a", "b"), 2, ["c"], ScalePlan(3, 2, 2, None, ("c",))),
        # gone and its replacement already runs: Warden cannot name a pod, keeps replicas
        (group(3, 3), pods("a", "b", "d"), 2, ["c"], ScalePlan(3, 3, None, None, ("c",), 1)),
        # a healthy pod is never chosen by count: nothing named, nothing removed
        (group(3, 3), pods("a", "b", "c"), 2, [], ScalePlan(3, 3, None, None, (), 1)),
        # a retry after the patch (before KubeRay acted, and after): no change
        (group(2, 2), pods("a", "b", "c"), 2, ["c"], ScalePlan(2, 2)),
        (group(2, 2), pods("a", "b"), 2, ["c"], ScalePlan(2, 2, None, None, ("c",))),
        # two lost pods of four, failed ones before pending ones when filling
        (group(4, 4), pods("a", "b", "e:Pending", "f:Failed"), 2, ["c", "d"],
         ScalePlan(4, 2, 2, ("f", "e"), ("c", "d"))),
        # a pod of another group or cluster is never written into workersToDelete
        (group(3, 3), pods("a", "b", "c"), 2, ["other-pod", "c"],
         ScalePlan(3, 2, 2, ("c",), ("other-pod",))),
        # never grows; a cluster without pods (a count) still shrinks
        (group(3, 3), pods("a", "b", "c"), 5, ["c"], ScalePlan(3, 3)),
        (group(16, 16), [], 14, [], ScalePlan(16, 14, 14)),
    ],
)  # fmt: skip
def test_shrink_plan(spec, listed, target, named, expected):
    assert shrink_plan(spec, listed, target, named) == expected


@pytest.mark.parametrize(
    ("spec", "shrunk", "free", "expected"),
    [
        (group(2, 2), {"replicas": 4, "minReplicas": 4}, 0, ScalePlan(2, 2)),
        (group(2, 2), {"replicas": 4, "minReplicas": 4}, 1, ScalePlan(2, 3, 3)),
        (group(2, 2), {"replicas": 4, "minReplicas": 4}, 9, ScalePlan(2, 4, 4)),
        (group(2, 2, ["c"]), {"replicas": 4, "minReplicas": 4}, 1, ScalePlan(2, 3, 3, ())),
        (group(4, 4), {"replicas": 4, "minReplicas": 4}, 3, ScalePlan(4, 4)),
        (group(2, 1), {"replicas": 4, "minReplicas": 1}, 2, ScalePlan(2, 4, 1)),
        (group(2, 2), {"replicas": 4, "minReplicas": 4}, -1, ScalePlan(2, 2)),
    ],
)
def test_grow_plan(spec, shrunk, free, expected):
    assert grow_plan(spec, shrunk, free) == expected


@pytest.mark.parametrize(
    ("spec", "wanted"),
    [
        ({"replicas": 3, "minReplicas": 1, "maxReplicas": 4}, 3),
        ({"replicas": 0, "minReplicas": 2, "maxReplicas": 4}, 2),
        ({"replicas": 9, "minReplicas": 2, "maxReplicas": 4}, 4),
        ({"replicas": 3, "suspend": True}, 0),
        ({"minReplicas": 2}, 2),
    ],
)
def test_kuberay_desired_replicas(spec, wanted):
    assert desired(spec) == wanted


def cluster_of_four(seed: int = 0):
    """Four nodes, a RayCluster whose worker group has one pod on each; the pod on node 2 is
    the lost replica group's (its node failed: Warden cordoned it, the pod still listed)."""
    fleet = FakeCluster.create(nodes=4, prefix="k")
    fleet.add_raycluster(NS, NAME, {GROUP: 4}, SELECTOR)
    names = fleet.add_ray_workers(NS, NAME, GROUP, [fleet.node_name(i) for i in range(4)])
    acts = WardenActivities(fleet.kube, fleet.gcp, fleet.prom, MemorySink(), settings())
    return fleet, acts, FakeKubeRay(fleet.store, seed), names


def fail_node(fleet: FakeCluster, index: int) -> None:
    fleet.kube.patch_node(fleet.node_name(index), True, {"warden.platform.reve.dev/reason": "x"})


def live(fleet: FakeCluster) -> set[str]:
    return {key.split("/", 1)[1] for key in fleet.pods()}


def test_a_count_only_shrink_lets_kuberay_delete_a_healthy_pod():
    """What the fake models: without workersToDelete, KubeRay deletes the first pod its
    cache lists, in no defined order; over a few orders one is a healthy pod. (Lowering
    `replicas` alone does nothing while `minReplicas` holds it: R1.)"""
    chosen = set()
    for seed in range(12):
        fleet, _, kuberay, names = cluster_of_four(seed)
        fleet.kube.scale_worker_group(NS, NAME, 0, {"replicas": 3, "minReplicas": 3})
        deleted = kuberay.reconcile()["deleted"]
        assert len(deleted) == 1
        chosen.add(deleted[0].split("/", 1)[1])
    assert chosen - {names[2]}, "the fake never picked a healthy pod"


@pytest.mark.parametrize("seed", range(6))
def test_shrink_after_a_lost_group_deletes_exactly_its_pod_and_grow_recreates(seed):
    fleet, acts, kuberay, names = cluster_of_four(seed)
    lost, healthy = names[2], set(names) - {names[2]}
    fail_node(fleet, 2)
    result = acts.shrink(ShrinkInput(NS, NAME, GROUP, 4, 3, [lost]))
    assert (result.replicas_before, result.replicas_after, result.deleted) == (4, 3, [lost])
    assert kuberay.reconcile() == {"deleted": [f"{NS}/{lost}"], "created": []}
    assert kuberay.reconcile() == {"deleted": [], "created": []}  # stable
    assert live(fleet) == healthy
    # the same request again (a retry after the answer was lost): nothing more
    again = acts.shrink(ShrinkInput(NS, NAME, GROUP, 4, 3, [lost]))
    assert not again.changed and kuberay.reconcile() == {"deleted": [], "created": []}

    assert acts.grow(GrowInput(Timings())).grown == 0  # node 2 still cordoned: no capacity
    fleet.kube.patch_node(fleet.node_name(2), False, {"warden.platform.reve.dev/reason": None})
    grown = acts.grow(GrowInput(Timings()))
    assert (grown.grown, grown.pods) == (1, 1)
    created = kuberay.reconcile()["created"]
    assert len(created) == 1 and live(fleet) >= healthy
    assert fleet.schedule() == {created[0].split("/", 1)[1]: fleet.node_name(2)}
    cluster = fleet.kube.get_raycluster(NS, NAME)
    spec = cluster["spec"]["workerGroupSpecs"][0]
    assert (spec["replicas"], spec["minReplicas"], spec["scaleStrategy"]) == (
        4, 4, {"workersToDelete": []},
    )  # fmt: skip
    assert SHRUNK not in cluster["metadata"].get("annotations", {})
    assert acts.grow(GrowInput(Timings())).grown == 0  # nothing left to restore


def test_a_lost_pod_kuberay_already_replaced_takes_its_pending_replacement():
    """The lost pod was deleted (its node gone) and KubeRay made a replacement, which waits:
    the shrink names the replacement, never a running pod."""
    fleet, acts, kuberay, names = cluster_of_four(3)
    fail_node(fleet, 2)
    fleet.delete_pod(NS, names[2])
    replacement = kuberay.reconcile()["created"]
    assert len(replacement) == 1 and fleet.schedule() == {}  # no free node for it
    result = acts.shrink(ShrinkInput(NS, NAME, GROUP, 4, 3, [names[2]]))
    assert result.deleted == [replacement[0].split("/", 1)[1]]
    assert kuberay.reconcile() == {"deleted": replacement, "created": []}
    assert live(fleet) == set(names) - {names[2]}
    event = fleet.events("WardenShrink")[0]["message"]
    assert f"not the group's pods (gone, or another's): {names[2]}" in event


def test_a_pod_of_another_cluster_named_in_a_shrink_is_never_deleted():
    fleet, acts, kuberay, names = cluster_of_four(1)
    fleet.add_raycluster(NS, "other", {GROUP: 1}, SELECTOR)
    fleet.add_nodes(1)
    (other,) = fleet.add_ray_workers(NS, "other", GROUP, [fleet.node_name(4)])
    result = acts.shrink(ShrinkInput(NS, NAME, GROUP, 4, 3, [other]))
    assert not result.changed and result.deleted == []
    assert kuberay.reconcile() == {"deleted": [], "created": []}
    assert live(fleet) == set(names) | {other}


def test_grow_waits_for_a_node_the_group_fits_and_leaves_kept_nodes_of_others():
    fleet, acts, kuberay, names = cluster_of_four(2)
    fail_node(fleet, 2)
    acts.shrink(ShrinkInput(NS, NAME, GROUP, 4, 3, [names[2]]))
    kuberay.reconcile()
    (kept,) = fleet.add_nodes(1)  # a new node, kept for another namespace
    fleet.kube.set_node_keep(kept, {"platform.reve.dev/kept-for": "media"}, {}, [])
    assert acts.grow(GrowInput(Timings())).grown == 0
    fleet.kube.set_node_keep(kept, {"platform.reve.dev/kept-for": NS}, {}, [])
    assert acts.grow(GrowInput(Timings())).pods == 1
    kuberay.reconcile()
    assert list(fleet.schedule().values()) == [kept]
