"""KubeRay's RayCluster reconcile, as far as it decides which worker pods live, over the
fake cluster's store: what a shrink or grow Warden writes leads to (tests only).

    ray = FakeKubeRay(fleet.store, seed=3)
    ray.reconcile()            # {"deleted": [...], "created": [...]}, one pass, every cluster

Modelled on KubeRay v1.6.2 (tag `v1.6.2`, commit 598eb66a), `ray-operator/controllers/ray/
raycluster_controller.go` (`reconcilePods`, "controller.go" below) and `utils/util.go`. Each
rule names the lines it follows:

- R1 desired pods: `replicas` clamped to [`minReplicas`, `maxReplicas`], times `numOfHosts`;
  a suspended group wants none (util.go:387-405, `GetWorkerGroupDesiredReplicas`).
- R2 the group's pods are those labelled `ray.io/cluster=<name>`, `ray.io/group=<group>` in
  the namespace (controller.go:776-779, common/association.go:113-121), listed from the
  controller's cache in no defined order: the fake shuffles them with its seed.
- R3 pods in phase Failed or Succeeded are deleted first (controller.go:803-823,
  `shouldDeletePod` 1197-1250); when any was, nothing is created in that pass
  (controller.go:825-828).
- R4 every pod named in `scaleStrategy.workersToDelete` is deleted, whatever `replicas`
  says; a name that is not found is skipped (controller.go:830-850). The list is cleared
  only in the controller's copy (controller.go:851), so it stays in the spec and is tried
  again at every pass: the fake keeps it too.
- R5 what is left of the listed pods counts against the desired number, pending and
  terminating pods included (controller.go:853-865).
- R6 fewer than desired: new pods are created, named `<cluster>-<group>-worker-` plus five
  generated characters (controller.go:881-903, util.go:201-215, `PodName`).
- R7 more than desired, with in-tree autoscaling off (as the runner renders): the first
  pods of the listed order are deleted (controller.go:910-944); with autoscaling on and
  `ENABLE_RANDOM_POD_DELETE` unset, none (controller.go:914-928, 945-947).
- R8 `replicas`, `minReplicas`, `maxReplicas` and `workersToDelete` are left out of the
  spec hash that a Recreate upgrade strategy compares (util.go:643-666, controller.go:
  672-687), so a shrink or grow never recreates the cluster's pods: not modelled further.
- R9 once a RayJob's RayCluster exists, changes to the RayJob's `rayClusterSpec` are
  disregarded (rayjob_controller.go:962-964): a patched RayCluster stays as patched.

Not modelled: scale expectations (controller.go:768-771: the fake's cache is always in
step), multi-host groups (`numOfHosts` > 1 with RayMultiHostIndexing, controller.go:
793-800 and 979-1140: the fake refuses them), and the head pod.
"""

from __future__ import annotations

import random
import string

from warden.fake import FakeStore
from warden.fakeobjects import make_pod
from warden.kuberay import RAY_CLUSTER_LABEL, RAY_GROUP_LABEL, RAY_NODE_TYPE_LABEL

TERMINAL_PHASES = ("Failed", "Succeeded")


def desired(group: dict) -> int:
    """R1: the pods KubeRay wants for a worker group."""
    if group.get("suspend"):
        return 0
    replicas = group.get("replicas")
    low, high = group.get("minReplicas", 0), group.get("maxReplicas", 2**31 - 1)
    wanted = low if replicas is None or replicas < low else min(replicas, high)
    return wanted * max(1, group.get("numOfHosts", 1))


def worker_pod(namespace: str, cluster: str, group: str, suffix: str, node: str = "",
               selector: dict | None = None) -> dict:  # fmt: skip
    """A worker pod as KubeRay creates it (R6): Pending until the fake schedules it."""
    prefix = f"{cluster}-{group}"[:50].lower()
    pod = make_pod(f"{prefix}-worker-{suffix}", namespace, node)
    pod["spec"]["nodeSelector"] = dict(selector or {})
    pod["metadata"]["labels"] |= {RAY_CLUSTER_LABEL: cluster, RAY_GROUP_LABEL: group,
                                  RAY_NODE_TYPE_LABEL: "worker"}  # fmt: skip
    if not node:
        pod["spec"].pop("nodeName")
        pod["status"]["phase"] = "Pending"
    return pod


class FakeKubeRay:
    """One KubeRay operator over the fake store (`reconcile` is one pass)."""

    def __init__(self, store: FakeStore, seed: int = 0, random_delete: bool = False):
        self.store = store
        self.rng = random.Random(seed)
        self.random_delete = random_delete
        """ENABLE_RANDOM_POD_DELETE=true (only read with in-tree autoscaling on)."""

    def reconcile(self) -> dict[str, list[str]]:
        """One pass over every RayCluster's worker groups; the pods deleted and created."""
        done: dict[str, list[str]] = {"deleted": [], "created": []}
        with self.store.txn() as state:
            for cluster in state["rayclusters"].values():
                for group in cluster["spec"].get("workerGroupSpecs", []):
                    self._group(state, cluster, group, done)
        return done

    def _group(self, state: dict, cluster: dict, group: dict, done: dict) -> None:
        if group.get("numOfHosts", 1) > 1:
            raise NotImplementedError("multi-host worker groups are not modelled")
        meta = cluster["metadata"]
        namespace, name, group_name = meta["namespace"], meta["name"], group["groupName"]
        listed = [
            key
            for key, pod in state["pods"].items()  # R2: the group's pods, in no set order
            if pod["metadata"]["namespace"] == namespace
            and pod["metadata"].get("labels", {}).get(RAY_CLUSTER_LABEL) == name
            and pod["metadata"].get("labels", {}).get(RAY_GROUP_LABEL) == group_name
        ]
        self.rng.shuffle(listed)
        unhealthy = [k for k in listed if state["pods"][k]["status"]["phase"] in TERMINAL_PHASES]
        if unhealthy:  # R3: delete them, create nothing in this pass
            for key in unhealthy:
                self._delete(state, key, done)
            return
        for pod_name in (group.get("scaleStrategy") or {}).get("workersToDelete") or []:
            key = f"{namespace}/{pod_name}"  # R4: any pod of that name in the namespace
            if key in state["pods"]:
                self._delete(state, key, done)
        running = [k for k in listed if k in state["pods"]]  # R5
        diff = desired(group) - len(running)
        if diff > 0:  # R6
            for _ in range(diff):
                suffix = "".join(self.rng.choices(string.ascii_lowercase + string.digits, k=5))
                selector = group.get("template", {}).get("spec", {}).get("nodeSelector")
                pod = worker_pod(namespace, name, group_name, suffix, selector=selector)
                key = f"{namespace}/{pod['metadata']['name']}"
                state["pods"][key] = pod
                self.store.count(state, "kuberay-create", key)
                done["created"].append(key)
        elif diff < 0 and (not cluster["spec"].get("enableInTreeAutoscaling")
                           or self.random_delete):  # fmt: skip
            for key in running[:-diff]:  # R7: the first ones listed
                self._delete(state, key, done)

    def _delete(self, state: dict, key: str, done: dict) -> None:
        state["pods"].pop(key)
        self.store.count(state, "kuberay-delete", key)
        done["deleted"].append(key)
