"""An in-memory Kubernetes API for tests: objects keyed by (apiVersion, kind, ns, name).

Beyond storing objects it plays the parts of the cluster the day-2 commands touch:
- `pod_logs[(namespace, pod, container)]` holds log text (`container` may be None);
- exec runs the command as a local process by default (the "pod" is this machine), or
  through `exec_handler(namespace, pod, command, container, stdin) -> ExecResult`;
- `ports[(namespace, pod, port)] = (host, port)` routes port-forwarding to a local server;
- `reactors` are called as `reactor(fake, verb, obj)` after apply and delete, the way
  client-go's fake lets a test play a controller (e.g. complete a Job).
"""

from __future__ import annotations

import copy
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator

from runner.kube import ExecResult, KubeError, NotFound, Object, describe
from runner.kube.ops import RunOps

ExecHandler = Callable[[str, str, list[str], "str | None", "bytes | None"], ExecResult]
Reactor = Callable[["FakeKube", str, Object], None]


def _key(obj: Object) -> tuple[str, str, str | None, str]:
    meta = obj.get("metadata", {})
    return obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]


def local_exec(
    namespace: str, pod: str, command: list[str], container: str | None, stdin: bytes | None
) -> ExecResult:
    """Run the command on this machine, as if this machine were the pod."""
    done = subprocess.run(command, input=stdin or b"", capture_output=True, timeout=600)
    return ExecResult(done.returncode, done.stdout, done.stderr)


class FakeKube(RunOps):
    """Stores applied objects; records every call in `calls` for assertions."""

    def __init__(
        self,
        objects: list[Object] | None = None,
        exec_handler: ExecHandler | None = None,
    ):
        self.objects: dict[tuple, Object] = {}
        self.calls: list[tuple] = []
        self.pod_logs: dict[tuple[str, str, str | None], str] = {}
        self.ports: dict[tuple[str, str, int], tuple[str, int]] = {}
        self.reactors: list[Reactor] = []
        self.exec_handler: ExecHandler = exec_handler or local_exec
        for obj in objects or []:
            self.objects[_key(obj)] = copy.deepcopy(obj)

    def apply(self, obj: Object) -> Object:
        self.calls.append(("apply", *_key(obj)))
        stored = copy.deepcopy(obj)
        self.objects[_key(obj)] = stored
        for reactor in list(self.reactors):
            reactor(self, "apply", copy.deepcopy(stored))
        return copy.deepcopy(self.objects.get(_key(obj), stored))

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Object:
        self.calls.append(("get", api_version, kind, namespace, name))
        try:
            return copy.deepcopy(self.objects[(api_version, kind, namespace, name)])
        except KeyError:
            raise NotFound(f"{describe(kind, namespace, name)} not found") from None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        labels: dict[str, str] | None = None,
    ) -> list[Object]:
        self.calls.append(("list", api_version, kind, namespace))
        found = []
        for (version, k, ns, _), obj in sorted(self.objects.items(), key=lambda kv: str(kv[0])):
            if (version, k) != (api_version, kind) or (namespace and ns != namespace):
                continue
            have = obj.get("metadata", {}).get("labels", {})
            if all(have.get(key) == value for key, value in (labels or {}).items()):
                found.append(copy.deepcopy(obj))
        return found

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        self.calls.append(("delete", api_version, kind, namespace, name))
        obj = self.objects.pop((api_version, kind, namespace, name), None)
        if obj is None:
            raise NotFound(f"{describe(kind, namespace, name)} not found")
        for reactor in list(self.reactors):
            reactor(self, "delete", obj)

    # --- pods -------------------------------------------------------------------------------

    def _pod(self, namespace: str, pod: str) -> Object:
        try:
            return self.objects[("v1", "Pod", namespace, pod)]
        except KeyError:
            raise NotFound(f"Pod {namespace}/{pod} not found") from None

    def logs(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        previous: bool = False,
    ) -> Iterator[str]:
        self.calls.append(("logs", namespace, pod, container, follow, tail, previous))
        spec = self._pod(namespace, pod).get("spec", {})
        names = [c["name"] for c in spec.get("containers", [])]
        if container is not None and names and container not in names:
            raise KubeError(f"container {container} is not valid for pod {pod}")
        text = self.pod_logs.get((namespace, pod, container))
        if text is None and container is None and names:
            text = self.pod_logs.get((namespace, pod, names[0]))
        lines = (text or "").splitlines()
        return iter(lines[-tail:] if tail else lines)

    def exec(
        self,
        namespace: str,
        pod: str,
        command: list[str],
        container: str | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        self.calls.append(("exec", namespace, pod, tuple(command), container))
        self._pod(namespace, pod)
        return self.exec_handler(namespace, pod, list(command), container, stdin)

    def exec_interactive(
        self, namespace: str, pod: str, command: list[str], container: str | None = None
    ) -> int:
        """Feed this process's standard input to the command and print what it writes."""
        stdin = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else b""
        result = self.exec(namespace, pod, command, container, stdin)
        sys.stdout.write(result.stdout.decode(errors="replace"))
        sys.stdout.flush()
        return result.returncode

    def open_port(self, namespace: str, pod: str, port: int) -> socket.socket:
        self.calls.append(("open_port", namespace, pod, port))
        self._pod(namespace, pod)
        target = self.ports.get((namespace, pod, port))
        if target is None:
            raise KubeError(f"pod {pod} does not listen on port {port}")
        return socket.create_connection(target, timeout=10)

    def events(self, namespace: str, name: str | None = None) -> list[Object]:
        events = self.list("v1", "Event", namespace)
        if name is not None:
            events = [e for e in events if e.get("involvedObject", {}).get("name") == name]
        return sorted(events, key=lambda e: str(e.get("lastTimestamp") or ""))
