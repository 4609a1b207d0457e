"""The narrow adapter through which `runner` reaches the Kubernetes API.

Commands depend on the `Kube` protocol only. `connect()` returns the real adapter
(`runner.kube.real`, the official `kubernetes` client) when a kubeconfig or in-cluster
credentials exist; tests pass `runner.kube.fake.FakeKube`, an in-memory cluster.
"""

from __future__ import annotations

from typing import Any, Protocol

Object = dict[str, Any]


class KubeError(Exception):
    """The API refused a request or could not be reached."""


class NotFound(KubeError):
    """The object does not exist."""


class Kube(Protocol):
    """What runner needs from a cluster; every object is a plain manifest dict."""

    def apply(self, obj: Object) -> Object:
        """Create or replace one object (server-side apply on the real cluster)."""
        ...

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Object: ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        labels: dict[str, str] | None = None,
    ) -> list[Object]: ...

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None: ...
