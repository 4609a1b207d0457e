"""The fake cluster's store and its Kubernetes adapter (`FakeKube`), in memory or on disk.

`warden.fakefleet` adds the GCP and Prometheus fakes over the same store and the knobs tests
turn. `FakeCluster()` keeps its state in memory; `FakeCluster(path)` keeps it in a JSON file
under an exclusive file lock, so a worker subprocess and the test share one cluster. Every side
effect is counted (`counts("cordon")`, `"reboot"`, `"evict"`, `"repair"`, `"uncordon"`) and
logged with its time, which is what the tests assert on. Reboots and Jobs finish after
`reboot_s` / `job_s` of wall time; Job verdicts come from `set_outcome`. Faults injected with
`FakeCluster.inject` (a 5xx, a timeout, a 403, a 400 on one call, for a number of calls)
raise the same `warden.errors` classes as the real adapters, before the call acts or after
it acted (the answer lost).
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import threading
import time
from pathlib import Path

from warden import annotations
from warden.errors import api_error
from warden.fakeobjects import make_node, make_pod
from warden.fakewatch import FakeRayClusters, FakeWatch, _refresh_node, _touch
from warden.kube import Conflict, NotFound, Object


def empty_state(reboot_s: float, job_s: float, latency_s: float = 0.0) -> dict:
    return {
        "nodes": {}, "pods": {}, "events": {}, "jobs": {}, "rayclusters": {},
        "outcomes": {}, "metrics": {}, "private": {}, "requests": {}, "faults": [],
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

    def fault(self, service: str, call: str, key: str = "", after: bool = False) -> None:
        """Raise the error injected for this call (`FakeCluster.inject`), if one is due;
        each raised fault is counted as `fault` `<service>.<call> <status>`."""
        with self.txn() as state:
            faults = state.get("faults", [])
            due = next((f for f in faults if _matches(f, service, call, key, after)), None)
            if due is None:
                return
            due["times"] -= 1
            status = due["status"]
            bucket = state["counts"].setdefault("fault", {})
            what = f"{service}.{call} {status or 'timeout'}"
            bucket[what] = bucket.get(what, 0) + 1
        raise api_error(service, f"{call} {key}".strip(), status, due["detail"])

    def done(self, service: str, call: str, key: str) -> None:
        """After a side effect: the latency, then an answer lost if a fault says so."""
        self.pause()
        self.fault(service, call, key, after=True)


def _matches(fault: dict, service: str, call: str, key: str, after: bool) -> bool:
    return (
        fault["times"] != 0
        and fault["service"] == service
        and fault["call"] in (call, "*")
        and fault["key"] in ("", key)
        and fault["after"] == after
    )


def _stored_node(state: dict, name: str) -> Object:
    if name not in state["nodes"]:
        raise api_error("kube", f"node {name}", 404, "not found")
    return state["nodes"][name]


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


class FakeKube(FakeWatch, FakeRayClusters):
    """WardenKube over the fake store (watches: warden.fakewatch)."""

    def __init__(self, store: FakeStore):
        self.store = store

    def list_nodes(self) -> list[Object]:
        self.store.fault("kube", "list_nodes")
        with self.store.txn() as state:
            for name in state["nodes"]:
                _refresh_node(state, name)
            return copy.deepcopy(list(state["nodes"].values()))

    def get_node(self, name: str) -> Object:
        self.store.fault("kube", "get_node", name)
        with self.store.txn() as state:
            if name not in state["nodes"]:
                raise NotFound(f"node {name} not found")
            _refresh_node(state, name)
            return copy.deepcopy(state["nodes"][name])

    def patch_node(self, name, unschedulable, annotations, resource_version=None) -> Object:
        self.store.fault("kube", "patch_node", name)
        with self.store.txn() as state:
            node = _stored_node(state, name)
            if resource_version and resource_version != node["metadata"]["resourceVersion"]:
                raise Conflict(f"node {name} changed since it was read")
            _touch(node, state)
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
        self.store.done("kube", "patch_node", name)
        return result

    def set_node_keep(self, name, labels, annotations, taints, resource_version=None) -> Object:
        self.store.fault("kube", "set_node_keep", name)
        with self.store.txn() as state:
            node = _stored_node(state, name)
            if resource_version and resource_version != node["metadata"]["resourceVersion"]:
                raise Conflict(f"node {name} changed since it was read")
            _touch(node, state)
            for key, values in (("labels", labels), ("annotations", annotations)):
                stored = node["metadata"].setdefault(key, {})
                for item, value in values.items():
                    if value is None:
                        stored.pop(item, None)
                    else:
                        stored[item] = value
            node["spec"]["taints"] = copy.deepcopy(taints)
            self.store.count(state, "keep", name)
            result = copy.deepcopy(node)
        self.store.done("kube", "set_node_keep", name)
        return result

    def list_pods(self, node=None, namespace=None, labels=None) -> list[Object]:
        self.store.fault("kube", "list_pods", node or "")
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
        self.store.fault("kube", "evict_pod", key)
        with self.store.txn() as state:
            if state["pods"].pop(key, None) is None:
                return False
            self.store.count(state, "evict", key)
        self.store.done("kube", "evict_pod", key)
        return True

    def create_event(self, event: Object) -> bool:
        key = f"{event['metadata']['namespace']}/{event['metadata']['name']}"
        self.store.fault("kube", "create_event", event["involvedObject"]["name"])
        with self.store.txn() as state:
            if key in state["events"]:
                return False
            state["events"][key] = copy.deepcopy(event)
            state["log"].append([time.time(), "event", event["reason"]])
            return True

    def create_job(self, job: Object) -> bool:
        key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        self.store.fault("kube", "create_job", key)
        with self.store.txn() as state:
            if key in state["jobs"]:
                return False
            state["jobs"][key] = copy.deepcopy(job)
            state["private"][f"job/{key}"] = time.time()
            self.store.count(state, "job", key)
        self.store.done("kube", "create_job", key)
        return True

    def get_job(self, namespace: str, name: str) -> Object | None:
        key = f"{namespace}/{name}"
        self.store.fault("kube", "get_job", key)
        with self.store.txn() as state:
            if key not in state["jobs"]:
                return None
            _refresh_job(state, key)
            return copy.deepcopy(state["jobs"][key])

    def review_token(self, token: str, audiences: list[str]) -> Object:
        """A TokenReview of a token `FakeCluster.issue_token` made, as the API server answers
        it: unknown or expired tokens and foreign audiences are not authenticated."""
        self.store.fault("kube", "review_token")
        with self.store.txn() as state:
            issued = copy.deepcopy(state.get("tokens", {}).get(token))
        if issued is None or time.time() >= issued["expires"]:
            return {"authenticated": False, "error": "invalid bearer token"}
        common = [a for a in audiences if a in issued["audiences"]]
        if not common:
            return {"authenticated": False, "error": "token audiences are invalid for the target"}
        return {"authenticated": True, "user": issued["user"], "audiences": common}


__all__ = ["FakeKube", "FakeStore", "empty_state", "make_node", "make_pod"]
