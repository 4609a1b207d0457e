"""Activities on the workloads of a node: which block a reboot, notify owners, evict.

`inspect` groups the user pods on a node by job and classifies them (`warden.workloads`,
pure); `notify` puts an Event on each preemptible job's owner object before its pods are
evicted; `drain` evicts through the Eviction API (a pod already gone, or one a
PodDisruptionBudget protects, is left alone). Mixed into `WardenActivities`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity

from catalog import labels
from warden import rules, workloads
from warden.faults import beat
from warden.kube import Object
from warden.model import ActionResult, DrainInput, NodeAction, WorkloadReport


def _now() -> datetime:
    return datetime.now(UTC)


class DrainActivities:
    @activity.defn
    def inspect(self, inp: NodeAction) -> WorkloadReport:
        node = self._node(inp.node)
        pods = self.kube.list_pods(node=inp.node)
        siblings: dict[workloads.Key, set[str]] = {}
        for key in workloads.user_workloads(pods, self.settings.job_namespace):
            beat(key)
            namespace, kind, name = key
            if kind == "Run":
                found = self.kube.list_pods(namespace=namespace, labels={labels.RUN: name})
            else:
                found = [
                    p
                    for p in self.kube.list_pods(namespace=namespace)
                    if workloads.owner_key(p) == key
                ]
            siblings[key] = {p["spec"].get("nodeName", "") for p in found}
        report = workloads.classify(inp.node, pods, siblings, self.settings.job_namespace)
        report.cordoned = rules.cordoned_by_warden(rules.node_facts(node, _now()))
        return report

    def _workload_target(self, namespace: str, pod_names: list[str]) -> Object | None:
        for pod in self.kube.list_pods(namespace=namespace):
            if pod["metadata"]["name"] in pod_names:
                for ref in pod["metadata"].get("ownerReferences") or []:
                    meta = {"name": ref["name"], "namespace": namespace, "uid": ref.get("uid")}
                    return {
                        "apiVersion": ref.get("apiVersion", "v1"),
                        "kind": ref["kind"],
                        "metadata": meta,
                    }
                return pod
        return None

    @activity.defn
    def notify(self, inp: DrainInput) -> ActionResult:
        """Tell each preemptible job's owners (an Event on the workload) it will be evicted."""
        for w in inp.workloads:
            target = self._workload_target(w.namespace, w.pods)
            if target is not None:
                pods = ", ".join(w.pods)
                reason = f"node {inp.node} needs repair; {pods} are evicted in {inp.grace_s:g}s"
                self._emit(
                    target, inp.remediation_id, "drain-notice", reason, warning=True, node=inp.node
                )
        node = self._node(inp.node)
        names = ", ".join(f"{w.namespace}/{w.name}" for w in inp.workloads)
        self._emit(
            node, inp.remediation_id, "drain-scheduled", f"evicting {names} after {inp.grace_s:g}s"
        )
        return ActionResult(inp.node, True)

    @activity.defn
    def drain(self, inp: DrainInput) -> ActionResult:
        evicted = []
        for w in inp.workloads:
            for pod in w.pods:
                beat(pod)
                if self.kube.evict_pod(w.namespace, pod):
                    evicted.append(f"{w.namespace}/{pod}")
        node = self._node(inp.node)
        self._emit(
            node, inp.remediation_id, "drain", f"evicted {len(evicted)} pods", ", ".join(evicted)
        )
        return ActionResult(inp.node, bool(evicted), ", ".join(evicted))
