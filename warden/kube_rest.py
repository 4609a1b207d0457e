"""`RealKube`: the `WardenKube` adapter (`warden.kube`) over the Kubernetes REST API.

It speaks REST through the official `kubernetes` client's ApiClient (`api_client`:
in-cluster credentials or a kubeconfig). Every request carries a timeout (`timeout_s`); a
failed one raises the `warden.errors` class its status calls for (no answer: `Transient`),
and urllib3 does not retry on its own: Temporal's retry policy is the only one, with its
bound. `tests/kustomize/test_warden_rbac.py` reads the calls made here and checks Warden's
RBAC grants exactly them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from warden.errors import Conflict, NotFound, Refused, api_error
from warden.kube import Change, Object


def _message(data: bytes) -> str:
    """The `message` of a Kubernetes Status body, else the start of the body."""
    try:
        return str(json.loads(data).get("message", ""))
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")


def api_client(host: str | None = None) -> Any:
    """A `kubernetes` ApiClient: in-cluster credentials, else the kubeconfig, or a bare
    `host` (tests); urllib3's own retries off (Temporal retries, within bounds)."""
    from kubernetes import client, config

    if host is None:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        configuration = client.Configuration.get_default_copy()
    else:
        configuration = client.Configuration()
        configuration.host = host
    configuration.retries = False
    return client.ApiClient(configuration)


def watch_change(line: dict, call: str) -> Change:
    """A watch line as (type, object); an ERROR line raises its status's class (410: the
    version is too old, NotFound)."""
    kind, obj = line.get("type", ""), line.get("object") or {}
    if kind == "ERROR":
        raise api_error("kube", call, int(obj.get("code") or 500), str(obj.get("message", "")))
    return kind, obj


class RealKube:
    """WardenKube over the Kubernetes REST API; each request gives up after `timeout_s`."""

    def __init__(self, api: Any = None, timeout_s: float = 20.0):
        self.api = api if api is not None else api_client()
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Any = None, content_type: str | None = None):
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = self.api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        call = f"{method} {path.partition('?')[0]}"
        try:
            response = self.api.call_api(*params, _request_timeout=self.timeout_s)
            data = response.read()
        except ApiException as err:  # status 0: TLS or protocol trouble, no answer
            raise api_error("kube", call, err.status or None, str(err.reason or "")) from None
        except (HTTPError, OSError) as err:  # timeouts, refused or reset connections
            raise api_error("kube", call, None, f"{type(err).__name__}: {err}") from None
        if 200 <= response.status < 300:
            return json.loads(data) if data else None
        raise api_error("kube", call, response.status, _message(data))

    def _stream(self, path: str, timeout_s: float) -> Iterator[Change]:
        """A watch: one JSON object a line, read as it comes (the read timeout outlasts the
        server's `timeoutSeconds`); its errors are the `warden.errors` classes."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        headers = {"Accept": "application/json"}
        params = self.api.param_serialize("GET", path, header_params=headers,
                                          auth_settings=["BearerToken"])  # fmt: skip
        call = f"GET {path.partition('?')[0]} (watch)"
        try:
            response = self.api.call_api(
                *params, _request_timeout=(self.timeout_s, timeout_s + self.timeout_s)
            )
        except ApiException as err:
            raise api_error("kube", call, err.status or None, str(err.reason or "")) from None
        except (HTTPError, OSError) as err:
            raise api_error("kube", call, None, f"{type(err).__name__}: {err}") from None
        if not 200 <= response.status < 300:
            raise api_error("kube", call, response.status, _message(response.read()))
        raw, pending = response.response, b""
        try:
            for chunk in raw.stream(1 << 16):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield watch_change(json.loads(line), call)
        except (HTTPError, OSError) as err:
            raise api_error("kube", call, None, f"{type(err).__name__}: {err}") from None
        finally:
            raw.release_conn()

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Iterator[Change]:
        query = f"watch=1&allowWatchBookmarks=true&resourceVersion={quote(resource_version)}"
        yield from self._stream(f"/api/v1/nodes?{query}&timeoutSeconds={int(timeout_s)}",
                                timeout_s)  # fmt: skip

    def watch_node_events(self, resource_version, timeout_s) -> Iterator[Change]:
        nodes = "fieldSelector=" + quote("involvedObject.kind=Node")
        version = quote(resource_version)
        query = f"{nodes}&watch=1&allowWatchBookmarks=true&resourceVersion={version}"
        yield from self._stream(f"/api/v1/events?{query}&timeoutSeconds={int(timeout_s)}",
                                timeout_s)  # fmt: skip

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

    def list_rayclusters(self) -> list[Object]:
        return self._call("GET", "/apis/ray.io/v1/rayclusters")["items"]

    def scale_worker_group(self, namespace, name, index, fields, annotations=None,
                           resource_version=None) -> None:  # fmt: skip
        # A JSON patch: `add` sets an object member whether or not it exists; a stale
        # resourceVersion in the patched object makes the API server answer 409
        base = f"/spec/workerGroupSpecs/{index}"
        ops = [{"op": "add", "path": f"{base}/{key}", "value": v} for key, v in fields.items()]
        if annotations is not None:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
        if resource_version:
            ops.insert(0, {"op": "replace", "path": "/metadata/resourceVersion",
                           "value": resource_version})  # fmt: skip
        path = f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}"
        self._call("PATCH", path, ops, "application/json-patch+json")

    def review_token(self, token: str, audiences: list[str]) -> Object:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview"}
        body["spec"] = {"token": token, "audiences": audiences}
        review = self._call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body)
        return (review or {}).get("status") or {}
