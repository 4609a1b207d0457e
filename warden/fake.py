"""An in-memory (or on-disk) fake cluster behind Warden's Kubernetes, GCP and Prometheus adapters.

`FakeCluster()` keeps its state in memory; `FakeCluster(path)` keeps it in a JSON file under
an exclusive file lock, so a worker subprocess and the test share one cluster. Every side
effect is counted (`counts("cordon")`, `"reboot"`, `"evict"`, `"repair"`, `"uncordon"`) and
logged with its time, which is what the tests assert on. Reboots and Jobs finish after
`reboot_s` / `job_s` of wall time; Job verdicts come from `set_outcome`.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from catalog import labels
from warden import annotations
from warden.gcp import Instance
from warden.kube import NotFound, Object
from warden.rules import GpuTelemetry

ZONE_LABEL = "topology.kubernetes.io/zone"


def _stamp(seconds_ago: float = 0.0) -> str:
    moment = datetime.now(UTC) - timedelta(seconds=seconds_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def empty_state(reboot_s: float, job_s: float, latency_s: float = 0.0) -> dict:
    return {
        "nodes": {}, "pods": {}, "events": {}, "jobs": {}, "rayclusters": {},
        "outcomes": {}, "metrics": {}, "private": {}, "requests": {},
        "timing": {"reboot_s": reboot_s, "job_s": job_s, "latency_s": latency_s},
        "counts": {}, "log": [],
    }  # fmt: skip


class FakeStore:
    """The state dict, with transactions that are thread- and (on disk) process-safe."""

    def __init__(self, path: Path | None, state: dict | None, latency_s: float):
        self.path = Path(path) if path else None
        self.state = state
        self.latency_s = latency_s
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def txn(self):
        with self._lock:
            if self.path is None:
                yield self.state
                return
            with open(f"{self.path}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                state = json.loads(self.path.read_text())
                yield state
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(state))
                os.replace(tmp, self.path)

    def count(self, state: dict, kind: str, key: str) -> None:
        bucket = state["counts"].setdefault(kind, {})
        bucket[key] = bucket.get(key, 0) + 1
        state["log"].append([time.time(), kind, key])

    def pause(self) -> None:
        """Latency after a side effect, so a killed worker dies between effect and result."""
        if self.latency_s:
            time.sleep(self.latency_s)


def _refresh_node(state: dict, name: str) -> None:
    private = state["private"].get(name, {})
    ready_at = private.get("ready_at")
    if ready_at and time.time() >= ready_at:
        for cond in state["nodes"][name]["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond.update(status="True", lastTransitionTime=_stamp())
        private.pop("ready_at")


def _refresh_job(state: dict, key: str) -> None:
    job = state["jobs"][key]
    if job.get("status", {}).get("conditions"):
        return
    if time.time() - state["private"][f"job/{key}"] < state["timing"]["job_s"]:
        return
    meta_labels = job["metadata"].get("labels", {})
    node, kind = meta_labels.get(annotations.JOB_NODE), meta_labels.get(annotations.JOB_KIND)
    result = state["outcomes"].get(node, {}).get(kind, "succeeded")
    kind_name = "Complete" if result == "succeeded" else "Failed"
    job["status"] = {"conditions": [{"type": kind_name, "status": "True"}]}


class FakeKube:
    """WardenKube over the fake store."""

    def __init__(self, store: FakeStore):
        self.store = store

    def list_nodes(self) -> list[Object]:
        with self.store.txn() as state:
            for name in state["nodes"]:
                _refresh_node(state, name)
            return copy.deepcopy(list(state["nodes"].values()))

    def get_node(self, name: str) -> Object:
        with self.store.txn() as state:
            if name not in state["nodes"]:
                raise NotFound(f"node {name} not found")
            _refresh_node(state, name)
            return copy.deepcopy(state["nodes"][name])

    def patch_node(self, name, unschedulable, annotations) -> Object:
        with self.store.txn() as state:
            node = state["nodes"][name]
            was = bool(node["spec"].get("unschedulable"))
            if unschedulable is not None:
                node["spec"]["unschedulable"] = unschedulable
                if unschedulable:  # every cordon request counts, even on a cordoned node
                    self.store.count(state, "cordon", name)
                elif was:
                    self.store.count(state, "uncordon", name)
            stored = node["metadata"].setdefault("annotations", {})
            for key, value in annotations.items():
                if value is None:
                    stored.pop(key, None)
                else:
                    stored[key] = value
            result = copy.deepcopy(node)
        self.store.pause()
        return result

    def list_pods(self, node=None, namespace=None, labels=None) -> list[Object]:
        with self.store.txn() as state:
            pods = [
                pod
                for pod in state["pods"].values()
                if (node is None or pod["spec"].get("nodeName") == node)
                and (namespace is None or pod["metadata"]["namespace"] == namespace)
                and all(
                    pod["metadata"].get("labels", {}).get(k) == v for k, v in (labels or {}).items()
                )
            ]
            return copy.deepcopy(pods)

    def evict_pod(self, namespace: str, name: str) -> bool:
        key = f"{namespace}/{name}"
        with self.store.txn() as state:
            if state["pods"].pop(key, None) is None:
                return False
            self.store.count(state, "evict", key)
        self.store.pause()
        return True

    def create_event(self, event: Object) -> bool:
        key = f"{event['metadata']['namespace']}/{event['metadata']['name']}"
        with self.store.txn() as state:
            if key in state["events"]:
                return False
            state["events"][key] = copy.deepcopy(event)
            state["log"].append([time.time(), "event", event["reason"]])
            return True

    def create_job(self, job: Object) -> bool:
        key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        with self.store.txn() as state:
            if key in state["jobs"]:
                return False
            state["jobs"][key] = copy.deepcopy(job)
            state["private"][f"job/{key}"] = time.time()
            self.store.count(state, "job", key)
        self.store.pause()
        return True

    def get_job(self, namespace: str, name: str) -> Object | None:
        key = f"{namespace}/{name}"
        with self.store.txn() as state:
            if key not in state["jobs"]:
                return None
            _refresh_job(state, key)
            return copy.deepcopy(state["jobs"][key])

    def get_raycluster(self, namespace: str, name: str) -> Object:
        with self.store.txn() as state:
            try:
                return copy.deepcopy(state["rayclusters"][f"{namespace}/{name}"])
            except KeyError:
                raise NotFound(f"RayCluster {namespace}/{name} not found") from None

    def set_worker_replicas(self, namespace: str, name: str, index: int, replicas: int) -> None:
        with self.store.txn() as state:
            group = state["rayclusters"][f"{namespace}/{name}"]["spec"]["workerGroupSpecs"][index]
            group["replicas"] = replicas
            group["minReplicas"] = min(group.get("minReplicas", 0), replicas)
            self.store.count(state, "shrink", f"{namespace}/{name}")
        self.store.pause()


class FakeGcp:
    """WardenGcp over the fake store: a reset reboots the node (new boot id, Ready later)."""

    def __init__(self, store: FakeStore):
        self.store = store

    def reset(self, instance: Instance, request_id: str) -> None:
        with self.store.txn() as state:
            if request_id in state["requests"]:
                return
            state["requests"][request_id] = ["reset", instance.name]
            node = state["nodes"][instance.name]
            node["status"]["nodeInfo"]["bootID"] = str(uuid.uuid4())
            for cond in node["status"]["conditions"]:
                if cond["type"] == "Ready":
                    cond.update(status="Unknown", lastTransitionTime=_stamp())
            state["metrics"].pop(instance.name, None)  # the exporter starts afresh
            ready_at = time.time() + state["timing"]["reboot_s"]
            state["private"].setdefault(instance.name, {})["ready_at"] = ready_at
            self.store.count(state, "reboot", instance.name)
        self.store.pause()

    def repair(self, instance: Instance, reason: str, request_id: str) -> str:
        with self.store.txn() as state:
            if request_id not in state["requests"]:
                state["requests"][request_id] = ["repair", instance.name]
                self.store.count(state, "repair", instance.name)
        self.store.pause()
        return f"reported the host of {instance.name} as faulty"


class FakePrometheus:
    def __init__(self, store: FakeStore):
        self.store = store

    def gpu_telemetry(self) -> dict[str, GpuTelemetry]:
        with self.store.txn() as state:
            return {node: GpuTelemetry(**m) for node, m in state["metrics"].items()}


def make_node(name: str, pool: str = "h200-main", zone: str = "us-central1-b") -> Object:
    """A healthy, schedulable A3 Ultra node as GKE registers it."""
    node_labels = {labels.GKE_ACCELERATOR: "nvidia-h200-141gb", labels.GKE_NODEPOOL: pool}
    node_labels |= {
        ZONE_LABEL: zone,
        "kubernetes.io/hostname": name,
        **labels.gpu_node_labels("pretrain"),
    }
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": _stamp(86400)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {},
            "uid": str(uuid.uuid4()),
        },
        "spec": {},
        "status": {"conditions": [ready], "nodeInfo": {"bootID": str(uuid.uuid4())}},
    }


def make_pod(
    name: str, namespace: str, node: str, priority: str = labels.PRIORITY_DEFAULT,
    run: str | None = None, owner: tuple[str, str] | None = None,
) -> Object:  # fmt: skip
    """A running pod; `run` sets the run label, `owner` a (kind, name) controller."""
    meta: dict = {"name": name, "namespace": namespace, "labels": {}, "uid": str(uuid.uuid4())}
    if run:
        meta["labels"][labels.RUN] = run
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    spec = {"nodeName": node, "priorityClassName": priority}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running"},
    }
