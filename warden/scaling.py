"""Shrink a RayCluster worker group after training lost a replica group, and grow it back
when capacity returns. Mixed into `WardenActivities`.

`shrink` (ShrinkWorkflow, asked by the run through the gateway): one patch that names the
lost group's pods in `scaleStrategy.workersToDelete` and lowers `replicas` (and
`minReplicas`) to what is left (`warden.kuberay.shrink_plan`), and records what the group
had before in the RayCluster's `SHRUNK` annotation. Conditional on the RayCluster's
`resourceVersion`: a retry reads again and finds the shrink done.

`grow` (GrowWorkflow, every `timings.grow_period_s`): for each worker group Warden shrank,
count the nodes it could run on now (a node Warden repaired and uncordoned, a kept node
released or kept for the cluster's namespace, a new node: Ready, schedulable, matching the
group's nodeSelector, no user pod on it) less the group's pods still waiting for one, and
raise `replicas` by that many, never above what the group had (`grow_plan`). KubeRay then
creates the pods; the run's training heals a new replica group in.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from runner.keepnodes import KEPT_FOR
from warden import rules
from warden.annotations import SHRUNK
from warden.faults import beat
from warden.kube import NotFound, Object, resource_version
from warden.kuberay import (
    ScalePlan,
    Shrunk,
    group_pods,
    group_selector,
    grow_plan,
    shrink_plan,
    worker_group,
)
from warden.model import GrowInput, GrowResult, ShrinkInput, ShrinkResult
from warden.workloads import is_user_pod


def node_selector(group: dict) -> dict[str, str]:
    return (group.get("template", {}).get("spec", {}).get("nodeSelector")) or {}


def free_nodes(nodes: list[Object], pods: list[Object], warden_namespace: str) -> list[Object]:
    """Nodes a worker pod could take now: Ready, schedulable, no user pod on them."""
    busy = {
        p["spec"].get("nodeName")
        for p in pods
        if is_user_pod(p, warden_namespace) and p["spec"].get("nodeName")
    }
    now, free = datetime.now(UTC), []
    for node in nodes:
        facts = rules.node_facts(node, now)
        if facts.ready == "True" and not facts.unschedulable and facts.name not in busy:
            free.append(node)
    return free


def fits(node: Object, namespace: str, selector: dict[str, str]) -> bool:
    """Whether a pod of `namespace` with `selector` may land on `node` (the kept-for
    taint admits its own namespace only)."""
    node_labels = node["metadata"].get("labels") or {}
    kept = node_labels.get(KEPT_FOR)
    return all(node_labels.get(k) == v for k, v in selector.items()) and kept in (None, namespace)


class ScalingActivities:
    def _scale(self, cluster: Object, index: int, plan: ScalePlan, shrunk: Shrunk) -> None:
        spec = cluster["spec"]["workerGroupSpecs"][index]
        fields: dict = {"replicas": plan.replicas}
        if plan.min_replicas is not None:
            fields["minReplicas"] = plan.min_replicas
        if plan.workers_to_delete is not None:
            strategy = dict(spec.get("scaleStrategy") or {})
            fields["scaleStrategy"] = strategy | {"workersToDelete": list(plan.workers_to_delete)}
        notes = dict(cluster["metadata"].get("annotations") or {})
        text = shrunk.text()
        notes = {k: v for k, v in notes.items() if k != SHRUNK} | ({SHRUNK: text} if text else {})
        meta = cluster["metadata"]
        self.kube.scale_worker_group(meta["namespace"], meta["name"], index, fields, notes,
                                     resource_version(cluster))  # fmt: skip

    @activity.defn
    def shrink(self, inp: ShrinkInput) -> ShrinkResult:
        try:
            cluster = self.kube.get_raycluster(inp.namespace, inp.name)
        except NotFound as err:
            raise ApplicationError(str(err), type="NotFound", non_retryable=True) from None
        found = worker_group(cluster, inp.group)
        if found is None:
            message = f"RayCluster {inp.namespace}/{inp.name} has no worker group {inp.group}"
            raise ApplicationError(message, type="NotFound", non_retryable=True)
        index, spec = found
        listed = self.kube.list_pods(namespace=inp.namespace,
                                     labels=group_selector(inp.name, inp.group))  # fmt: skip
        plan = shrink_plan(spec, group_pods(listed), inp.replicas_to, list(inp.pods))
        if plan.changed:
            self._scale(cluster, index, plan, Shrunk.of(cluster).remember(inp.group, spec))
        deleted = list(plan.workers_to_delete or ())
        reason = f"worker group {inp.group}: {inp.replicas_from} -> {plan.replicas} replicas"
        reason += f", deleting {', '.join(deleted)}" if deleted else ""
        detail = f"was {plan.before}"
        if plan.not_in_group:
            detail += f"; not the group's pods (gone, or another's): {', '.join(plan.not_in_group)}"
        if plan.unnamed:
            detail += f"; {plan.unnamed} not removed: no pod of the group could be named"
        rid = f"shrink-{inp.namespace}-{inp.name}-{inp.group}-{inp.replicas_to}"
        self._emit(cluster, rid, "shrink", reason, detail, node="")
        after = plan.replicas if plan.changed else plan.before
        return ShrinkResult(plan.before, after, plan.changed, deleted)

    @activity.defn
    def grow(self, inp: GrowInput) -> GrowResult:
        result = GrowResult(rounds=1)
        shrunk = [c for c in self.kube.list_rayclusters()
                  if SHRUNK in (c["metadata"].get("annotations") or {})]  # fmt: skip
        if not shrunk:
            return result
        pods = self.kube.list_pods()
        beat("pods")
        free = free_nodes(self.kube.list_nodes(), pods, self.settings.job_namespace)
        for cluster in sorted(shrunk, key=lambda c: c["metadata"]["name"]):
            free = self._grow_cluster(cluster, pods, free, result)
        return result

    def _grow_cluster(self, cluster: Object, pods: list, free: list, result: GrowResult):
        """Raise each group of `cluster` Warden shrank by the free nodes it fits; the nodes
        left for the next cluster."""
        meta = cluster["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        memory = Shrunk.of(cluster)
        for group_name, before in sorted(memory.groups.items()):
            found = worker_group(cluster, group_name)
            if found is None:
                memory = Shrunk({g: v for g, v in memory.groups.items() if g != group_name})
                continue
            index, spec = found
            fitting = [n for n in free if fits(n, namespace, node_selector(spec))]
            mine = group_pods([p for p in pods if p["metadata"]["namespace"] == namespace
                               and _labelled(p, group_selector(name, group_name))])  # fmt: skip
            waiting = sum(1 for p in mine if p.phase == "Pending")
            plan = grow_plan(spec, before, len(fitting) - waiting)
            if not plan.changed:
                continue
            if plan.replicas >= int(before.get("replicas", 0)):
                memory = Shrunk({g: v for g, v in memory.groups.items() if g != group_name})
            added = plan.replicas - plan.before
            used = {n["metadata"]["name"] for n in fitting[:added]}
            free = [n for n in free if n["metadata"]["name"] not in used]
            self._scale(cluster, index, plan, memory)
            cluster = self.kube.get_raycluster(namespace, name)  # the next patch's version
            result.grown += 1
            result.pods += added
            reason = f"worker group {group_name}: {plan.before} -> {plan.replicas} replicas"
            rid = f"grow-{namespace}-{name}-{group_name}-{plan.replicas}"
            self._emit(cluster, rid, "grow", reason, f"{len(fitting)} free nodes", node="")
        return free


def _labelled(pod: Object, selector: dict[str, str]) -> bool:
    have = pod["metadata"].get("labels") or {}
    return all(have.get(k) == v for k, v in selector.items())
