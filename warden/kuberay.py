"""What Warden writes into a RayCluster worker group to shrink or grow it, so that KubeRay
deletes exactly the pods Warden means and never a healthy one. Pure functions, table-tested
(`tests/warden/test_kuberay.py`); the rules of KubeRay they rely on are modelled, with the
KubeRay source lines they follow, in `warden.fakeray`.

    pods = group_pods(kube.list_pods(namespace=ns, labels=group_selector(name, group)))
    plan = shrink_plan(spec_group, pods, target=14, named=["lm-h200-worker-x7k2p"])
    plan.patch   # {"replicas": 14, "minReplicas": 14, "workersToDelete": [...]}: one patch

Why a plan and not a count: with in-tree autoscaling off (as the runner renders RayClusters)
KubeRay meets a lower `replicas` by deleting the first pods its cache lists, which can be
healthy training pods. `scaleStrategy.workersToDelete` names the pods to delete; KubeRay
deletes them before it compares the count. So a shrink names every pod it removes and sets
`replicas` to what is left: KubeRay then has nothing to choose. When Warden cannot name a
pod (the lost pods are gone and no pod is pending), it lowers `replicas` only as far as the
pods that are left, and never lets KubeRay pick one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from warden.annotations import SHRUNK

RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_GROUP_LABEL = "ray.io/group"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"


def group_selector(cluster: str, group: str) -> dict[str, str]:
    """The labels KubeRay puts on a worker group's pods (and lists them by)."""
    return {RAY_CLUSTER_LABEL: cluster, RAY_GROUP_LABEL: group}


@dataclass(frozen=True)
class PodView:
    """What a plan reads of one of the group's pods."""

    name: str
    phase: str = "Running"
    """Pending, Running, Succeeded, Failed or Unknown."""
    terminating: bool = False
    """The pod has a deletionTimestamp (a dead node's pod can hang here for minutes)."""

    @property
    def starting_or_gone(self) -> bool:
        """Not a running member of the run: a pending pod, a failed or finished one, a pod
        on a node that stopped answering (Unknown), or one already being deleted."""
        return self.terminating or self.phase != "Running"

    @classmethod
    def of(cls, pod: dict) -> PodView:
        meta, status = pod.get("metadata", {}), pod.get("status") or {}
        terminating = bool(meta.get("deletionTimestamp"))
        return cls(meta["name"], status.get("phase", "Unknown"), terminating)


def group_pods(pods: list[dict]) -> list[PodView]:
    """The group's pods (as `list_pods` with `group_selector` returns them), by name."""
    return sorted((PodView.of(p) for p in pods), key=lambda p: p.name)


@dataclass(frozen=True)
class ScalePlan:
    """One patch of a worker group: `replicas`, `minReplicas` (None: leave it) and the
    complete `scaleStrategy.workersToDelete` list (None: leave it)."""

    before: int
    replicas: int
    min_replicas: int | None = None
    workers_to_delete: tuple[str, ...] | None = None
    not_in_group: tuple[str, ...] = ()
    """Pods the request named that are not the group's (gone already, or another's): never
    written into workersToDelete (KubeRay deletes any pod of that name in the namespace)."""
    unnamed: int = 0
    """Pods the request wanted gone that Warden could not name: the shrink stops short."""

    @property
    def changed(self) -> bool:
        return self.replicas != self.before or bool(self.workers_to_delete)

    @property
    def patch(self) -> dict:
        """The worker group's fields this plan sets (for the adapter's one patch)."""
        out: dict = {"replicas": self.replicas}
        if self.min_replicas is not None:
            out["minReplicas"] = self.min_replicas
        if self.workers_to_delete is not None:
            out["workersToDelete"] = list(self.workers_to_delete)
        return out


def removal_order(pod: PodView) -> tuple[int, str]:
    """Which unnamed pods go first when the named ones are gone: being deleted, then failed
    or unknown, then pending (a replacement KubeRay made for a lost pod); never running."""
    rank = 0 if pod.terminating else (2 if pod.phase == "Pending" else 1)
    return rank, pod.name


def shrink_plan(group: dict, pods: list[PodView], target: int, named: list[str]) -> ScalePlan:
    """Lower worker group `group` (a workerGroupSpecs entry) towards `target` replicas,
    deleting the `named` pods (the lost replica group's) and, where those are gone already,
    pods that are not running members (the replacements KubeRay made for them). Never
    grows; never leaves `replicas` below the pods that stay (KubeRay would then pick)."""
    before = int(group.get("replicas", 0))
    target = max(0, min(target, before))
    members = {p.name: p for p in pods}
    doomed = list(dict.fromkeys(n for n in named if n in members))
    foreign = tuple(n for n in dict.fromkeys(named) if n not in members)
    drop = before - target
    doomed = doomed[: max(drop, 0)]
    spare = sorted(
        (p for p in pods if p.starting_or_gone and p.name not in doomed), key=removal_order
    )
    doomed += [p.name for p in spare[: max(0, drop - len(doomed))]]
    replicas = min(before, max(target, len(pods) - len(doomed)))
    minimum = group.get("minReplicas")
    new_min = replicas if minimum is not None and int(minimum) > replicas else None
    return ScalePlan(
        before,
        replicas,
        new_min,
        tuple(doomed) if doomed else None,
        foreign,
        unnamed=max(0, replicas - target),
    )


@dataclass
class Shrunk:
    """What a worker group had before Warden first shrank it (the RayCluster's SHRUNK
    annotation, per group): a grow restores up to it, never above."""

    groups: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, raycluster: dict) -> Shrunk:
        text = (raycluster.get("metadata", {}).get("annotations") or {}).get(SHRUNK)
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            data = {}
        return cls({g: v for g, v in data.items() if isinstance(v, dict)})

    def remember(self, group: str, spec: dict) -> Shrunk:
        """The first shrink of `group` records its size; later ones keep the first."""
        kept = dict(self.groups)
        kept.setdefault(group, {"replicas": int(spec.get("replicas", 0)),
                                "minReplicas": int(spec.get("minReplicas", 0))})  # fmt: skip
        return Shrunk(kept)

    def text(self) -> str | None:
        """The annotation's value (None: remove it)."""
        return json.dumps(self.groups, sort_keys=True) if self.groups else None


def grow_plan(group: dict, shrunk: dict[str, int], free_nodes: int) -> ScalePlan:
    """Raise a group Warden shrank by up to `free_nodes` replicas (one pod a node), never
    above what it had before (`shrunk`), and clear the stale workersToDelete (KubeRay keeps
    the list in the spec and tries the names again at every reconcile)."""
    before = int(group.get("replicas", 0))
    ceiling = int(shrunk.get("replicas", before))
    replicas = min(ceiling, before + max(0, free_nodes))
    if replicas <= before:
        return ScalePlan(before, before)
    minimum = min(int(shrunk.get("minReplicas", replicas)), replicas)
    stale = (group.get("scaleStrategy") or {}).get("workersToDelete")
    return ScalePlan(before, replicas, minimum, () if stale else None)


def worker_group(raycluster: dict, name: str) -> tuple[int, dict] | None:
    """(index, spec) of worker group `name` in a RayCluster, or None."""
    for index, group in enumerate(raycluster.get("spec", {}).get("workerGroupSpecs", [])):
        if group.get("groupName") == name:
            return index, group
    return None
