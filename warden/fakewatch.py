"""The fake cluster's watches and RayClusters (mixed into `warden.fake.FakeKube`).

A watch polls the store every `WATCH_POLL_S` (in memory) or `DISK_POLL_S` (the on-disk
store a worker subprocess shares with a test) for objects whose resourceVersion is newer
than the last it saw: the store keeps one counter, as the API server does (`_touch`).
"""

from __future__ import annotations

import copy
import time

from warden.fakeobjects import _stamp
from warden.kube import Conflict, NotFound, Object
from warden.kube import resource_version as resource_version_of

WATCH_POLL_S = 0.02
"""How often a fake watch looks at the store (an API server sends changes as they happen)."""
DISK_POLL_S = 0.25
"""The same for the on-disk store (each look reads and writes the whole file)."""


def _touch(obj: Object, state: dict) -> None:
    """A write to an object: the store's next resourceVersion, as the API server gives it
    (one counter for the whole store, so a watch resumes after the last one it saw)."""
    state["revision"] = max(
        state.get("revision", 0), int(obj["metadata"].get("resourceVersion", "0"))
    )
    state["revision"] += 1
    obj["metadata"]["resourceVersion"] = str(state["revision"])


def _refresh_node(state: dict, name: str) -> None:
    private = state["private"].get(name, {})
    ready_at = private.get("ready_at")
    if ready_at and time.time() >= ready_at:
        for cond in state["nodes"][name]["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond.update(status="True", lastTransitionTime=_stamp())
        private.pop("ready_at")
        _touch(state["nodes"][name], state)


class FakeWatch:
    def watch_nodes(self, resource_version: str, timeout_s: float):
        """The store's node changes after `resource_version` ("0": every node first, as
        ADDED), then a BOOKMARK; deletions are not seen."""
        since = int(resource_version or 0)
        first = "ADDED" if since == 0 else "MODIFIED"
        yield from self._watch("nodes", since, first, timeout_s)

    def watch_node_events(self, resource_version: str, timeout_s: float):
        """Events about nodes (`FakeCluster.add_node_event`) after `resource_version`."""
        yield from self._watch("node_events", int(resource_version or 0), "ADDED", timeout_s)

    def _watch(self, kind: str, since: int, first: str, timeout_s: float):
        self.store.fault("kube", f"watch_{kind}")
        deadline, kind_of = time.monotonic() + timeout_s, first
        while True:
            with self.store.txn() as state:
                if kind == "nodes":
                    for name in state["nodes"]:
                        _refresh_node(state, name)
                changed = [
                    copy.deepcopy(obj)
                    for obj in state.get(kind, {}).values()
                    if int(obj["metadata"].get("resourceVersion", "0")) > since
                ]
                revision = state.get("revision", 0)
            changed.sort(key=lambda obj: int(obj["metadata"]["resourceVersion"]))
            for obj in changed:
                yield kind_of if since == 0 else "MODIFIED", obj
            since, kind_of = max(since, revision), "MODIFIED"
            if time.monotonic() >= deadline:
                yield "BOOKMARK", {"metadata": {"resourceVersion": str(since)}}
                return
            time.sleep(WATCH_POLL_S if self.store.path is None else DISK_POLL_S)


class FakeRayClusters:
    def get_raycluster(self, namespace: str, name: str) -> Object:
        self.store.fault("kube", "get_raycluster", f"{namespace}/{name}")
        with self.store.txn() as state:
            try:
                return copy.deepcopy(state["rayclusters"][f"{namespace}/{name}"])
            except KeyError:
                raise NotFound(f"RayCluster {namespace}/{name} not found") from None

    def list_rayclusters(self) -> list[Object]:
        self.store.fault("kube", "list_rayclusters")
        with self.store.txn() as state:
            return copy.deepcopy(list(state["rayclusters"].values()))

    def scale_worker_group(self, namespace, name, index, fields, annotations=None,
                           resource_version=None) -> None:  # fmt: skip
        key = f"{namespace}/{name}"
        self.store.fault("kube", "scale_worker_group", key)
        with self.store.txn() as state:
            if key not in state["rayclusters"]:
                raise NotFound(f"RayCluster {key} not found")
            cluster = state["rayclusters"][key]
            if resource_version and resource_version != resource_version_of(cluster):
                raise Conflict(f"RayCluster {key} changed since it was read")
            _touch(cluster, state)
            group = cluster["spec"]["workerGroupSpecs"][index]
            before = group.get("replicas", 0)
            group.update(copy.deepcopy(fields))
            if annotations is not None:
                cluster["metadata"]["annotations"] = dict(annotations)
            after = group.get("replicas", 0)
            kind = "shrink" if after < before else ("grow" if after > before else "scale")
            self.store.count(state, kind, key)
        self.store.done("kube", "scale_worker_group", key)
