"""Which pods on a node are user workloads, and which of those Warden may drain.

Pure functions; table tests in `tests/warden/test_workloads.py`. A node is rebooted only when
no user workload runs on it. A workload is drainable only when every pod of it on the node
has the preemptible priority class and the whole job runs on this one node; anything else
(non-preemptible priority, a job spanning several nodes) blocks the reboot and is never
evicted. DaemonSet pods, system namespaces and finished pods are not user workloads.
"""

from __future__ import annotations

from catalog import labels
from warden.model import Workload, WorkloadReport

SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "gke-managed-system")

Key = tuple[str, str, str]
"""(namespace, owner kind, owner name)."""


def owner_key(pod: dict) -> Key:
    """The job a pod belongs to: its run label, else its controller, else the pod itself."""
    meta = pod.get("metadata", {})
    run = (meta.get("labels") or {}).get(labels.RUN)
    if run:
        return meta.get("namespace", ""), "Run", run
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller", True):
            return meta.get("namespace", ""), ref["kind"], ref["name"]
    return meta.get("namespace", ""), "Pod", meta["name"]


def is_user_pod(pod: dict, warden_namespace: str) -> bool:
    meta = pod.get("metadata", {})
    namespace = meta.get("namespace", "")
    if namespace in SYSTEM_NAMESPACES or namespace == warden_namespace:
        return False
    if namespace.startswith("gke-") or namespace.startswith("gmp-"):
        return False
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return False
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def is_preemptible(pod: dict) -> bool:
    return pod.get("spec", {}).get("priorityClassName") == labels.PRIORITY_PREEMPTIBLE


def user_workloads(pods: list[dict], warden_namespace: str) -> dict[Key, list[dict]]:
    """Live user pods grouped by job (terminating pods left out)."""
    groups: dict[Key, list[dict]] = {}
    for pod in pods:
        if is_user_pod(pod, warden_namespace) and not pod["metadata"].get("deletionTimestamp"):
            groups.setdefault(owner_key(pod), []).append(pod)
    return groups


def classify(
    node: str,
    pods: list[dict],
    sibling_nodes: dict[Key, set[str]],
    warden_namespace: str,
) -> WorkloadReport:
    """Split the user workloads on `node` into blocking and drainable.

    `sibling_nodes[key]` holds the nodes of every pod of that job in the cluster; a job whose
    key is missing counts as spanning other nodes (never drained on a guess).
    """
    report = WorkloadReport(node=node)
    report.terminating = sum(
        1
        for pod in pods
        if is_user_pod(pod, warden_namespace) and pod["metadata"].get("deletionTimestamp")
    )
    for key, group in sorted(user_workloads(pods, warden_namespace).items()):
        workload = Workload(key[0], key[1], key[2], sorted(p["metadata"]["name"] for p in group))
        single_node = sibling_nodes.get(key, {node, "?"}) <= {node}
        if single_node and all(is_preemptible(p) for p in group):
            report.drainable.append(workload)
        else:
            report.blocking.append(workload)
    return report
