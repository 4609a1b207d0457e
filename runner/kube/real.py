"""The real adapter: a thin layer over the official `kubernetes` Python client.

Core (`v1`) kinds go through `CoreV1Api`'s typed methods (`read_namespaced_pod`, ...);
every other group (ray.io, batch, apps, kueue, ...) through `CustomObjectsApi`, which
speaks the same REST paths for built-in and custom resources and returns plain dicts.
Apply is server-side apply (`application/apply-patch+yaml`, field manager `runner`).
Pod streams (logs, exec, port-forward) and events live in `runner.kube.real_pods`.
Imported only when `runner.kube.connect()` finds credentials.
"""

from __future__ import annotations

import os
import re
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from runner.kube import KubeError, Object, describe
from runner.kube.ops import RunOps
from runner.kube.real_pods import PodCalls, api_error

FIELD_MANAGER = "runner"
APPLY = "application/apply-patch+yaml"
CLUSTER_SCOPED_CORE = {"Node", "Namespace", "PersistentVolume"}


def snake(kind: str) -> str:
    """`ConfigMap` -> `config_map`, as the typed client names its methods."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def plural(kind: str) -> str:
    """The REST resource name of a kind: RayJob -> rayjobs, NetworkPolicy -> networkpolicies."""
    lower = kind.lower()
    if lower.endswith(("s", "x")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + "s"


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


class RealKube(PodCalls, RunOps):
    """The `Kube` protocol on a live API server."""

    def __init__(self, api_client: client.ApiClient):
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    @classmethod
    def from_environment(cls, cluster: str | None = None) -> RealKube:
        """In-cluster credentials, else the kubeconfig (the GKE context of `cluster`)."""
        try:
            config.load_incluster_config()
            return cls(client.ApiClient())
        except config.ConfigException:
            pass
        context = None
        if cluster:
            from catalog import load_cluster

            spec = load_cluster(cluster, field="--cluster")
            context = f"gke_{spec.project}_{spec.region}_{spec.name}"
        files = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            return cls(config.new_client_from_config(config_file=files, context=context))
        except config.ConfigException as err:
            raise KubeError(f"kubeconfig: {str(err).splitlines()[0]}") from None

    # --- objects ----------------------------------------------------------------------------

    def _core(self, verb: str, kind: str, namespace: str | None, all_ns: bool = False):
        name = snake(kind)
        if kind in CLUSTER_SCOPED_CORE:
            return getattr(self.core, f"{verb}_{name}")
        if all_ns:
            return getattr(self.core, f"{verb}_{name}_for_all_namespaces")
        return getattr(self.core, f"{verb}_namespaced_{name}")

    def _plain(self, data: Any) -> Object:
        return self.api_client.sanitize_for_serialization(data)

    def apply(self, obj: Object) -> Object:
        group, version = split_api_version(obj["apiVersion"])
        meta = obj["metadata"]
        name, ns, kind = meta["name"], meta.get("namespace"), obj["kind"]
        common = {"field_manager": FIELD_MANAGER, "force": True, "_content_type": APPLY}
        try:
            if not group:
                if ns is None or kind in CLUSTER_SCOPED_CORE:
                    result = self._core("patch", kind, None)(name, obj, **common)
                else:
                    result = self._core("patch", kind, ns)(name, ns, obj, **common)
                return self._plain(result)
            if ns is None:
                return self.custom.patch_cluster_custom_object(
                    group, version, plural(kind), name, obj, **common
                )
            return self.custom.patch_namespaced_custom_object(
                group, version, ns, plural(kind), name, obj, **common
            )
        except ApiException as err:
            raise api_error(err, describe(kind, ns, name)) from None

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Object:
        group, version = split_api_version(api_version)
        try:
            if not group:
                if namespace is None or kind in CLUSTER_SCOPED_CORE:
                    return self._plain(self._core("read", kind, None)(name))
                return self._plain(self._core("read", kind, namespace)(name, namespace))
            if namespace is None:
                return self.custom.get_cluster_custom_object(group, version, plural(kind), name)
            return self.custom.get_namespaced_custom_object(
                group, version, namespace, plural(kind), name
            )
        except ApiException as err:
            raise api_error(err, describe(kind, namespace, name)) from None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        labels: dict[str, str] | None = None,
    ) -> list[Object]:
        group, version = split_api_version(api_version)
        selector = ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or None
        try:
            if not group:
                if kind in CLUSTER_SCOPED_CORE:
                    answer = self._core("list", kind, None)(label_selector=selector)
                elif namespace is None:
                    answer = self._core("list", kind, None, True)(label_selector=selector)
                else:
                    answer = self._core("list", kind, namespace)(namespace, label_selector=selector)
                items = self._plain(answer).get("items") or []
            elif namespace is None:
                items = self.custom.list_cluster_custom_object(
                    group, version, plural(kind), label_selector=selector
                )["items"]
            else:
                items = self.custom.list_namespaced_custom_object(
                    group, version, namespace, plural(kind), label_selector=selector
                )["items"]
        except ApiException as err:
            raise api_error(err, f"{kind} list in {namespace or 'all namespaces'}") from None
        for item in items:  # list items omit these; callers expect whole manifests
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        group, version = split_api_version(api_version)
        policy = {"propagation_policy": "Background"}
        try:
            if not group:
                if namespace is None or kind in CLUSTER_SCOPED_CORE:
                    self._core("delete", kind, None)(name, **policy)
                else:
                    self._core("delete", kind, namespace)(name, namespace, **policy)
            elif namespace is None:
                self.custom.delete_cluster_custom_object(
                    group, version, plural(kind), name, **policy
                )
            else:
                self.custom.delete_namespaced_custom_object(
                    group, version, namespace, plural(kind), name, **policy
                )
        except ApiException as err:
            raise api_error(err, describe(kind, namespace, name)) from None
