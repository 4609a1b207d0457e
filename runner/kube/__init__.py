"""The narrow adapter through which `runner` reaches the Kubernetes API.

Commands depend on the `Kube` protocol only and get their client from `connect()`, which
returns the real adapter (`runner.kube.real`, the official `kubernetes` client, imported
lazily) when a kubeconfig or in-cluster credentials exist. Tests monkeypatch `connect` to
return `runner.kube.fake.FakeKube`, an in-memory cluster.

    from runner import kube
    client = kube.connect(cluster="ultra-usc1")
    pods = client.pods_of_run("research", "tiny-lm")
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

Object = dict[str, Any]


class KubeError(Exception):
    """The API refused a request or could not be reached."""


class NotFound(KubeError):
    """The object does not exist."""


def describe(kind: str, namespace: str | None, name: str) -> str:
    """How errors name an object: `RayJob research/tiny-lm`, `Node gke-n1`."""
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


@dataclass(frozen=True)
class ExecResult:
    """What a command run inside a container returned."""

    returncode: int
    """exit status of the command (non-zero: it failed)"""
    stdout: bytes
    """everything it wrote on standard output"""
    stderr: bytes
    """everything it wrote on standard error"""


class PortSocket(Protocol):
    """A connected stream to one port of a pod (a socket or the client's socket wrapper)."""

    def sendall(self, data: bytes) -> None: ...
    def recv(self, size: int) -> bytes: ...
    def close(self) -> None: ...


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

    def logs(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        previous: bool = False,
    ) -> Iterator[str]:
        """Lines of a container's log; with follow, until the container stops."""
        ...

    def exec(
        self,
        namespace: str,
        pod: str,
        command: list[str],
        container: str | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run a command in a container and wait for it."""
        ...

    def exec_interactive(
        self, namespace: str, pod: str, command: list[str], container: str | None = None
    ) -> int:
        """Run a command attached to this terminal; returns its exit status."""
        ...

    def open_port(self, namespace: str, pod: str, port: int) -> PortSocket:
        """A new stream connected to `port` inside the pod (one per forwarded connection)."""
        ...

    def events(self, namespace: str, name: str | None = None) -> list[Object]:
        """Events of a namespace, or of the objects called `name`, oldest first."""
        ...

    # Built on the calls above, shared by every adapter (see runner.kube.ops.RunOps).
    def pods_of_run(self, namespace: str | None, run: str) -> list[Object]: ...
    def objects_of_run(self, namespace: str | None, run: str) -> list[Object]: ...
    def delete_run(self, namespace: str | None, run: str) -> list[Object]: ...
    def copy_to(
        self, namespace: str, pod: str, local: Path, remote: str, container: str | None = None
    ) -> None: ...
    def copy_from(
        self, namespace: str, pod: str, remote: str, local: Path, container: str | None = None
    ) -> None: ...


def has_credentials(environ: dict[str, str] | None = None) -> bool:
    """True when a kubeconfig file or in-cluster service-account credentials exist."""
    env = os.environ if environ is None else environ
    if env.get("KUBERNETES_SERVICE_HOST") and Path(SERVICE_ACCOUNT_TOKEN).is_file():
        return True
    paths = env.get("KUBECONFIG", "").split(os.pathsep) if env.get("KUBECONFIG") else []
    paths = paths or [str(Path("~/.kube/config").expanduser())]
    return any(p and Path(p).is_file() for p in paths)


SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def connect(cluster: str | None = None) -> Kube:
    """The real adapter for `cluster` (its GKE kubeconfig context), else the current context.

    Raises KubeError (one line) when there are no credentials at all.
    """
    if not has_credentials():
        raise KubeError(
            "no Kubernetes credentials: no kubeconfig (~/.kube/config or $KUBECONFIG) "
            "and not running in a cluster; run `gcloud container clusters get-credentials`"
        )
    from runner.kube.real import RealKube

    return RealKube.from_environment(cluster)
