"""A fake fleet to run Warden against: seed nodes and pods, inject faults, count side effects.

`FakeGcp` and `FakePrometheus` serve Warden's GCP and Prometheus adapters from the fake
store (`warden.fake`); `FakeCluster` bundles them with `FakeKube`.

    fleet = FakeCluster.create("state.json", nodes=16)    # on disk: `warden worker --fake`
    fleet.set_metrics("gpu-0003", xids=[79])              # a definite fault
    fleet.counts("cordon")                                 # {"gpu-0003": 1}

`FakeCluster()` without a path keeps everything in memory (tests, benchmarks).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from warden.fake import FakeKube, FakeStore, _touch, empty_state
from warden.fakeobjects import _stamp, make_node, make_pod
from warden.gcp import Instance
from warden.kube import Object
from warden.rules import GpuTelemetry


def _restart(state: dict, name: str) -> None:
    """The VM restarts: a new boot id, NotReady until `reboot_s` later; DCGM figures and
    node-problem-detector conditions start afresh (a fault that persists comes back only
    when injected again)."""
    node = state["nodes"][name]
    _touch(node, state)
    node["status"]["nodeInfo"]["bootID"] = str(uuid.uuid4())
    for cond in node["status"]["conditions"]:
        if cond["type"] == "Ready":
            cond.update(status="Unknown", lastTransitionTime=_stamp())
        elif cond["status"] == "True":
            cond.update(status="False", reason="NodeRebooted", lastTransitionTime=_stamp())
    state["metrics"].pop(name, None)  # the exporter starts afresh
    ready_at = time.time() + state["timing"]["reboot_s"]
    state["private"].setdefault(name, {})["ready_at"] = ready_at


class FakeGcp:
    """WardenGcp over the fake store: a reset reboots the node; a repair moves the VM to a
    healthy host (`report-faulty-host`), which restarts it too. Request ids deduplicate."""

    def __init__(self, store: FakeStore):
        self.store = store

    def _once(self, call: str, kind: str, instance: Instance, request_id: str) -> None:
        self.store.fault("gcp", call, instance.name)
        with self.store.txn() as state:
            if request_id in state["requests"]:
                return
            state["requests"][request_id] = [kind, instance.name]
            _restart(state, instance.name)
            self.store.count(state, kind, instance.name)
        self.store.done("gcp", call, instance.name)

    def reset(self, instance: Instance, request_id: str) -> None:
        self._once("reset", "reboot", instance, request_id)

    def repair(self, instance: Instance, reason: str, request_id: str) -> str:
        self._once("repair", "repair", instance, request_id)
        return f"reported the host of {instance.name} as faulty"


class FakePrometheus:
    def __init__(self, store: FakeStore):
        self.store = store

    def gpu_telemetry(self) -> dict[str, GpuTelemetry]:
        with self.store.txn() as state:
            return {node: GpuTelemetry(**m) for node, m in state["metrics"].items()}


def _ready(node: Object) -> bool:
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    return not node["spec"].get("unschedulable") and bool(ready) and ready[0]["status"] == "True"


class FakeCluster:
    """The fake adapters over one store, plus the knobs tests turn."""

    def __init__(
        self,
        path: str | Path | None = None,
        latency_s: float = 0.0,
        reboot_s: float = 0.5,
        job_s: float = 0.2,
        prefix: str = "gpu",
    ):
        """Open the fake at `path` (created if missing; its own timings then apply)."""
        self.prefix = prefix
        if path and not Path(path).exists():
            Path(path).write_text(json.dumps(empty_state(reboot_s, job_s, latency_s)))
        if path:
            latency_s = json.loads(Path(path).read_text())["timing"].get("latency_s", 0.0)
        state = None if path else empty_state(reboot_s, job_s, latency_s)
        self.store = FakeStore(Path(path) if path else None, state, latency_s)
        self.kube = FakeKube(self.store)
        self.gcp = FakeGcp(self.store)
        self.prom = FakePrometheus(self.store)

    @classmethod
    def create(cls, path: str | Path | None = None, nodes: int = 0, **kwargs) -> FakeCluster:
        fleet = cls(path, **kwargs)
        fleet.add_nodes(nodes)
        return fleet

    def node_name(self, index: int) -> str:
        return f"{self.prefix}-{index:04d}"

    def add_nodes(self, count: int, pool: str = "h200-main") -> list[str]:
        with self.store.txn() as state:
            start = sum(1 for name in state["nodes"] if name.startswith(self.prefix + "-"))
            names = [self.node_name(i) for i in range(start, start + count)]
            for name in names:
                state["nodes"][name] = make_node(name, pool)
        return names

    def add_pod(self, name: str, namespace: str, node: str, **kwargs) -> None:
        with self.store.txn() as state:
            state["pods"][f"{namespace}/{name}"] = make_pod(name, namespace, node, **kwargs)

    def delete_pod(self, namespace: str, name: str) -> None:
        """The pod is gone (its run ended or was deleted)."""
        with self.store.txn() as state:
            state["pods"].pop(f"{namespace}/{name}", None)

    def add_raycluster(self, namespace: str, name: str, groups: dict[str, int],
                       selector: dict[str, str] | None = None) -> None:  # fmt: skip
        """A RayCluster as the runner renders it (replicas = minReplicas = maxReplicas, no
        in-tree autoscaling); `selector`: the worker pods' nodeSelector."""
        template = {"spec": {"nodeSelector": dict(selector or {})}}
        specs = [
            {"groupName": g, "replicas": n, "minReplicas": n, "maxReplicas": n,
             "template": template}
            for g, n in groups.items()
        ]  # fmt: skip
        obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster"}
        obj |= {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"}}
        obj["spec"] = {"enableInTreeAutoscaling": False, "workerGroupSpecs": specs}
        with self.store.txn() as state:
            state["rayclusters"][f"{namespace}/{name}"] = obj

    def add_ray_workers(self, namespace: str, cluster: str, group: str, nodes: list[str]):
        """One running worker pod of the group on each node, as KubeRay made them; their
        names in node order."""
        from warden.fakeray import worker_pod

        names = []
        with self.store.txn() as state:
            spec = state["rayclusters"][f"{namespace}/{cluster}"]["spec"]["workerGroupSpecs"]
            template = next(g for g in spec if g["groupName"] == group).get("template", {})
            selector = template.get("spec", {}).get("nodeSelector")
            for i, node in enumerate(nodes):
                pod = worker_pod(namespace, cluster, group, f"w{i:04d}", node, selector)
                state["pods"][f"{namespace}/{pod['metadata']['name']}"] = pod
                names.append(pod["metadata"]["name"])
        return names

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> None:
        with self.store.txn() as state:
            state["pods"][f"{namespace}/{name}"]["status"]["phase"] = phase

    def schedule(self) -> dict[str, str]:
        """The scheduler: each Pending pod onto a Ready, schedulable node with no pod that
        matches its nodeSelector (and kept-for taint), in name order; {pod: node}."""
        from warden.scaling import fits

        placed = {}
        with self.store.txn() as state:
            taken = {p["spec"].get("nodeName") for p in state["pods"].values()}
            for _, pod in sorted(state["pods"].items()):
                if pod["status"]["phase"] != "Pending":
                    continue
                selector = pod["spec"].get("nodeSelector") or {}
                namespace = pod["metadata"]["namespace"]
                node = next((n for name, n in sorted(state["nodes"].items()) if name not in taken
                             and _ready(n) and fits(n, namespace, selector)), None)  # fmt: skip
                if node is not None:
                    name = node["metadata"]["name"]
                    pod["spec"]["nodeName"], pod["status"]["phase"] = name, "Running"
                    taken.add(name)
                    placed[pod["metadata"]["name"]] = name
        return placed

    def issue_token(
        self, namespace: str, service_account: str = "training", audience: str = "warden",
        ttl_s: float = 600.0, pod: str = "",
    ) -> str:  # fmt: skip
        """A projected service-account token, as the kubelet mounts it in a pod."""
        token = uuid.uuid4().hex
        user = {"username": f"system:serviceaccount:{namespace}:{service_account}"}
        user |= {"groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]}
        user["extra"] = {"authentication.kubernetes.io/pod-name": [pod]} if pod else {}
        issued = {"user": user, "audiences": [audience], "expires": time.time() + ttl_s}
        with self.store.txn() as state:
            state.setdefault("tokens", {})[token] = issued
        return token

    def set_metrics(self, node: str, **fields) -> None:
        """Inject DCGM figures (GpuTelemetry fields) for a node."""
        with self.store.txn() as state:
            state["metrics"][node] = asdict(GpuTelemetry(**fields))

    def clear_metrics(self, node: str) -> None:
        with self.store.txn() as state:
            state["metrics"].pop(node, None)

    def set_condition(self, node: str, kind: str, reason: str, status: str = "True") -> None:
        """A node-problem-detector condition (or Ready, with status False/Unknown)."""
        with self.store.txn() as state:
            _touch(state["nodes"][node], state)
            conditions = state["nodes"][node]["status"]["conditions"]
            conditions[:] = [c for c in conditions if c["type"] != kind]
            stamp = _stamp(3600)
            conditions.append(
                {"type": kind, "status": status, "reason": reason, "lastTransitionTime": stamp}
            )

    def add_node_event(self, node: str, reason: str, message: str, seconds_ago: float = 0,
                       component: str = "kernel-monitor") -> None:  # fmt: skip
        """An Event on a node, as node-problem-detector posts one (a watch sees it)."""
        stamp = _stamp(seconds_ago)
        with self.store.txn() as state:
            events = state.setdefault("node_events", {})
            event = {"apiVersion": "v1", "kind": "Event", "reason": reason, "message": message,
                     "metadata": {"name": f"{node}.{uuid.uuid4().hex[:12]}",
                                  "namespace": "default"},
                     "involvedObject": {"kind": "Node", "name": node},
                     "source": {"component": component, "host": node},
                     "firstTimestamp": stamp, "lastTimestamp": stamp}  # fmt: skip
            _touch(event, state)
            events[event["metadata"]["name"]] = event

    def set_outcome(self, node: str, kind: str, result: str) -> None:
        """Verdict of the next `check` or `diag` Job on a node: succeeded or failed."""
        with self.store.txn() as state:
            state["outcomes"].setdefault(node, {})[kind] = result

    def inject(
        self, service: str, call: str, status: int | str, times: int = 1, key: str = "",
        after: bool = False, detail: str = "",
    ) -> None:  # fmt: skip
        """Make the next `times` calls (-1: every call) of `service` (`kube`, `gcp`) `call`
        (an adapter method, `*` for any) on `key` (a node name, `namespace/name`; "" for
        any) fail with HTTP `status`, or `"timeout"` (no answer). `after`: the call acts,
        then its answer is lost. Raised faults count as `counts("fault")`."""
        fault = {"service": service, "call": call, "key": key, "times": times}
        fault |= {"status": None if status == "timeout" else int(status), "after": after}
        fault["detail"] = detail or ("timed out" if status == "timeout" else "injected")
        with self.store.txn() as state:
            state.setdefault("faults", []).append(fault)

    def counts(self, kind: str) -> dict[str, int]:
        with self.store.txn() as state:
            return dict(state["counts"].get(kind, {}))

    def log(self, kind: str | None = None) -> list[tuple[float, str, str]]:
        with self.store.txn() as state:
            return [tuple(row) for row in state["log"] if kind is None or row[1] == kind]

    def events(self, reason: str | None = None) -> list[Object]:
        with self.store.txn() as state:
            found = list(state["events"].values())
        return [e for e in found if reason is None or e["reason"] == reason]

    def node(self, name: str) -> Object:
        return self.kube.get_node(name)

    def pods(self) -> list[str]:
        with self.store.txn() as state:
            return sorted(state["pods"])


__all__ = ["FakeCluster", "make_node", "make_pod"]
