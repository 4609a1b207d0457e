"""Pod streams of the real adapter: logs, exec (captured or on this terminal), port-forward
and events, over the official client's `CoreV1Api` and `kubernetes.stream` websockets.

A mixin of `runner.kube.real.RealKube`, which provides `self.core` (a CoreV1Api) and
`self._plain` (the client's serializer to plain dicts).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException

from runner.kube import ExecResult, KubeError, NotFound, Object


def api_error(err: ApiException, what: str) -> KubeError:
    """The adapter's one-line error for an API answer (NotFound for 404)."""
    if err.status == 404:
        return NotFound(f"{what} not found")
    reason = (err.reason or "").strip() or "error"
    return KubeError(f"{what}: the API answered {err.status} {reason}")


class PodCalls:
    """The `Kube` protocol's pod calls on a live API server."""

    core: Any
    """the client's CoreV1Api"""
    _plain: Any
    """turns the client's models into plain dicts"""

    def logs(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        previous: bool = False,
    ) -> Iterator[str]:
        try:
            response = self.core.read_namespaced_pod_log(
                pod,
                namespace,
                container=container,
                follow=follow,
                tail_lines=tail,
                previous=previous,
                _preload_content=False,
            )
        except ApiException as err:
            raise api_error(err, f"logs of {namespace}/{pod}") from None
        return _lines(response)

    def _ws_exec(self, namespace, pod, command, container, stdin: bool, tty: bool):
        from kubernetes.stream import stream

        try:
            return stream(
                self.core.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                command=command,
                container=container,
                stderr=not tty,
                stdin=stdin,
                stdout=True,
                tty=tty,
                _preload_content=False,
                binary=True,
            )
        except ApiException as err:
            raise api_error(err, f"exec in {namespace}/{pod}") from None

    def exec(
        self,
        namespace: str,
        pod: str,
        command: list[str],
        container: str | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        ws = self._ws_exec(namespace, pod, command, container, stdin is not None, False)
        if stdin is not None:
            for start in range(0, len(stdin), 1 << 20):
                ws.write_stdin(stdin[start : start + (1 << 20)])
            ws.close_channel(0)
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout if timeout else None
        while ws.is_open():
            ws.update(timeout=1)
            out += ws.read_stdout(timeout=0) if ws.peek_stdout() else b""
            err += ws.read_stderr(timeout=0) if ws.peek_stderr() else b""
            if deadline and time.monotonic() > deadline:
                ws.close()
                raise KubeError(f"exec in {namespace}/{pod} timed out after {timeout:.0f}s")
        out += ws.read_stdout(timeout=0) if ws.peek_stdout() else b""
        err += ws.read_stderr(timeout=0) if ws.peek_stderr() else b""
        return ExecResult(ws.returncode or 0, bytes(out), bytes(err))

    def exec_interactive(
        self, namespace: str, pod: str, command: list[str], container: str | None = None
    ) -> int:
        from runner.kube.terminal import attach

        ws = self._ws_exec(namespace, pod, command, container, True, True)
        return attach(ws)

    def open_port(self, namespace: str, pod: str, port: int):
        from kubernetes.stream import portforward

        try:
            forward = portforward(
                self.core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port)
            )
        except ApiException as err:
            raise api_error(err, f"port-forward to {namespace}/{pod}") from None
        return forward.socket(port)

    def events(self, namespace: str, name: str | None = None) -> list[Object]:
        selector = f"involvedObject.name={name}" if name else None
        try:
            answer = self.core.list_namespaced_event(namespace, field_selector=selector)
        except ApiException as err:
            raise api_error(err, f"events in {namespace}") from None
        items = self._plain(answer).get("items") or []
        return sorted(items, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime")))


def _lines(response: Any) -> Iterator[str]:
    """Split a streamed HTTP body into lines as they arrive."""
    pending = b""
    try:
        for chunk in response.stream(4096):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.decode(errors="replace")
        if pending:
            yield pending.decode(errors="replace")
    finally:
        response.release_conn()
