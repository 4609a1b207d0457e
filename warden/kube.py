"""The narrow adapter through which Warden reaches the Kubernetes API.

Activities depend on the `WardenKube` protocol only; every object is a plain manifest dict.
`RealKube` speaks REST through the official `kubernetes` client's ApiClient (in-cluster
credentials or a kubeconfig); `warden.fake.FakeKube` is the in-memory (or on-disk) cluster
the tests use.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import quote

Object = dict[str, Any]


class NotFound(Exception):
    """The object does not exist."""


class Refused(Exception):
    """The API server refused for now (429: an eviction a PodDisruptionBudget forbids)."""


class Conflict(Exception):
    """The object already exists, or changed since it was read (a failed precondition)."""


class WardenKube(Protocol):
    """What Warden needs from a cluster."""

    def list_nodes(self) -> list[Object]: ...

    def get_node(self, name: str) -> Object: ...

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

    def set_worker_replicas(self, namespace: str, name: str, index: int, replicas: int) -> None:
        """Set replicas (and lower minReplicas to match) of workerGroupSpecs[index]."""
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


class RealKube:
    """WardenKube over the Kubernetes REST API."""

    def __init__(self, api_client: Any = None):
        from kubernetes import client, config

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = client.ApiClient()
        self.api = api_client

    def _call(self, method: str, path: str, body: Any = None, content_type: str | None = None):
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = self.api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        try:
            response = self.api.call_api(*params)
            data = response.read()
        except ApiException as err:
            status = err.status
        else:
            status = response.status
            if 200 <= status < 300:
                return json.loads(data) if data else None
        if status == 404:
            raise NotFound(f"{method} {path}: not found")
        if status == 429:
            raise Refused(f"{method} {path}: refused for now (HTTP 429)")
        if status == 409:
            raise Conflict(f"{method} {path}: conflict (exists, or changed since read)")
        raise RuntimeError(f"{method} {path}: HTTP {status}")

    def list_nodes(self) -> list[Object]:
        # resourceVersion=0: served from the API server's watch cache, cheap every sweep
        return self._call("GET", "/api/v1/nodes?resourceVersion=0")["items"]

    def get_node(self, name: str) -> Object:
        return self._call("GET", f"/api/v1/nodes/{name}")

    def patch_node(self, name, unschedulable, annotations, resource_version=None) -> Object:
        patch: Object = {"metadata": {"annotations": annotations}}
        if resource_version:  # the API server's precondition: 409 when the node changed
            patch["metadata"]["resourceVersion"] = resource_version
        if unschedulable is not None:
            patch["spec"] = {"unschedulable": unschedulable}
        kind = "application/strategic-merge-patch+json"
        return self._call("PATCH", f"/api/v1/nodes/{name}", patch, kind)

    def set_node_keep(self, name, labels, annotations, taints, resource_version=None) -> Object:
        # spec.taints has no merge key: the list given replaces the node's whole list
        patch: Object = {"metadata": {"labels": labels, "annotations": annotations}}
        if resource_version:
            patch["metadata"]["resourceVersion"] = resource_version
        patch["spec"] = {"taints": taints}
        kind = "application/strategic-merge-patch+json"
        return self._call("PATCH", f"/api/v1/nodes/{name}", patch, kind)

    def list_pods(self, node=None, namespace=None, labels=None) -> list[Object]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        query = []
        if node:
            query.append("fieldSelector=" + quote(f"spec.nodeName={node}"))
        if labels:
            query.append("labelSelector=" + quote(",".join(f"{k}={v}" for k, v in labels.items())))
        return self._call("GET", path + ("?" + "&".join(query) if query else ""))["items"]

    def evict_pod(self, namespace: str, name: str) -> bool:
        body = {"apiVersion": "policy/v1", "kind": "Eviction"}
        body["metadata"] = {"name": name, "namespace": namespace}
        try:
            self._call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)
        except (NotFound, Refused):
            return False
        return True

    def _create(self, path: str, obj: Object) -> bool:
        try:
            self._call("POST", path, obj)
        except Conflict:
            return False
        return True

    def create_event(self, event: Object) -> bool:
        return self._create(f"/api/v1/namespaces/{event['metadata']['namespace']}/events", event)

    def create_job(self, job: Object) -> bool:
        return self._create(f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs", job)

    def get_job(self, namespace: str, name: str) -> Object | None:
        try:
            return self._call("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
        except NotFound:
            return None

    def get_raycluster(self, namespace: str, name: str) -> Object:
        return self._call("GET", f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}")

    def set_worker_replicas(self, namespace: str, name: str, index: int, replicas: int) -> None:
        base = f"/spec/workerGroupSpecs/{index}"
        ops = [{"op": "replace", "path": f"{base}/replicas", "value": replicas}]
        group = self.get_raycluster(namespace, name)["spec"]["workerGroupSpecs"][index]
        if group.get("minReplicas", 0) > replicas:
            ops.append({"op": "replace", "path": f"{base}/minReplicas", "value": replicas})
        path = f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}"
        self._call("PATCH", path, ops, "application/json-patch+json")
