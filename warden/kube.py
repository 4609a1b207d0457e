"""The narrow adapter through which Warden reaches the Kubernetes API.

Activities depend on the `WardenKube` protocol only; every object is a plain manifest dict.
`warden.kube_rest.RealKube` speaks REST through the official `kubernetes` client (every
request with a timeout; Temporal's retry policy the only retry); `warden.fake.FakeKube` is
the in-memory (or on-disk) cluster the tests use. Here too: the Event manifest Warden
writes (`event_manifest`), the state of a Job it reads (`job_state`) and the
`resource_version` a conditional node patch carries.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

from warden.errors import Conflict, NotFound, Refused

Object = dict[str, Any]
Change = tuple[str, Object]
"""One watch event: its type and the object."""
__all__ = ["Conflict", "NotFound", "Refused", "WardenKube"]


class WardenKube(Protocol):
    """What Warden needs from a cluster."""

    def list_nodes(self) -> list[Object]: ...

    def get_node(self, name: str) -> Object: ...

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Iterator[Change]:
        """Changes to nodes after `resource_version` ("0": every node first, as ADDED) for
        up to `timeout_s`: ("ADDED" | "MODIFIED" | "DELETED", node), and ("BOOKMARK",
        object) whose resourceVersion is where to resume. NotFound (410) when the version
        is too old to resume from: start again from "0"."""
        ...

    def watch_node_events(self, resource_version: str, timeout_s: float) -> Iterator[Change]:
        """Events whose involved object is a Node, created or updated after
        `resource_version` ("0": every one the API server holds first), for up to
        `timeout_s`; as `watch_nodes`."""
        ...

    def patch_node(
        self,
        name: str,
        unschedulable: bool | None,
        annotations: dict[str, str | None],
        resource_version: str | None = None,
    ) -> Object:
        """Set the unschedulable flag (None: leave it) and annotations (None: remove).

        With `resource_version` (the node as the caller read it) the patch applies only if
        the node has not changed since; otherwise it raises Conflict. So two attempts of one
        activity running at once (a timed-out attempt still finishing) never both act."""
        ...

    def set_node_keep(
        self,
        name: str,
        labels: dict[str, str | None],
        annotations: dict[str, str | None],
        taints: list[Object],
        resource_version: str | None = None,
    ) -> Object:
        """Set labels and annotations (None: remove) and replace `spec.taints` with `taints`;
        conditional on `resource_version` like `patch_node` (Conflict when it changed)."""
        ...

    def list_pods(
        self, node: str | None = None, namespace: str | None = None, labels: dict | None = None
    ) -> list[Object]: ...

    def evict_pod(self, namespace: str, name: str) -> bool:
        """Evict through the Eviction API; False when the pod is already gone or its
        PodDisruptionBudget refuses the eviction now."""
        ...

    def create_event(self, event: Object) -> bool:
        """Create an Event; False when one of that name exists (a retried action)."""
        ...

    def create_job(self, job: Object) -> bool:
        """Create a batch/v1 Job; False when it exists already."""
        ...

    def get_job(self, namespace: str, name: str) -> Object | None: ...

    def get_raycluster(self, namespace: str, name: str) -> Object: ...

    def list_rayclusters(self) -> list[Object]:
        """Every RayCluster of the cluster (a grow looks for the ones Warden shrank)."""
        ...

    def scale_worker_group(
        self,
        namespace: str,
        name: str,
        index: int,
        fields: dict[str, Any],
        annotations: dict[str, str] | None = None,
        resource_version: str | None = None,
    ) -> None:
        """One patch of a RayCluster: set `fields` of workerGroupSpecs[index] (`replicas`,
        `minReplicas`, `scaleStrategy`) and, unless None, replace its annotations with
        `annotations`. With `resource_version` (the RayCluster as the caller read it) the
        patch applies only if the RayCluster has not changed since; otherwise Conflict."""
        ...

    def review_token(self, token: str, audiences: list[str]) -> Object:
        """The `status` of a TokenReview of `token` for `audiences` (authenticated, user,
        audiences, error): who a caller of Warden's gateway is (warden.gateway)."""
        ...


def event_manifest(
    name: str,
    target: Object,
    reason: str,
    message: str,
    warning: bool = False,
    now: datetime | None = None,
) -> Object:
    """A core/v1 Event about `target` (a Node, a RayCluster, a Job, ...) from Warden.

    Node events go to the `default` namespace, where `kubectl describe node` finds them.
    """
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = target.get("metadata", {})
    namespace = meta.get("namespace") or "default"
    involved = {"apiVersion": target.get("apiVersion", "v1"), "kind": target["kind"]}
    involved |= {
        "name": meta["name"],
        **({"namespace": namespace} if meta.get("namespace") else {}),
    }
    if meta.get("uid"):
        involved["uid"] = meta["uid"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": "warden"},
        "reportingComponent": "warden",
        "reportingInstance": "warden",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def resource_version(obj: Object) -> str | None:
    """An object's resourceVersion: a `patch_node` or `set_node_keep` given it fails
    (Conflict, retried) if another attempt changed the node since this one read it."""
    return obj["metadata"].get("resourceVersion")


def job_state(job: Object | None) -> str:
    """running, succeeded, failed or missing, from a Job's status conditions."""
    if job is None:
        return "missing"
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if cond.get("status") == "True" and cond.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    return "running"
