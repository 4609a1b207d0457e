"""Forward local TCP connections to a port inside a pod (`runner port-forward`).

Each accepted connection gets its own stream from `kube.open_port`, and two threads copy
bytes each way until either side closes. Stop it with `close()`.
"""

from __future__ import annotations

import socket
import threading
from typing import Any


class Forwarder:
    """Listens on `address:local_port` (0 picks a free port) and forwards to `pod:port`."""

    def __init__(
        self,
        kube: Any,
        namespace: str,
        pod: str,
        port: int,
        local_port: int = 0,
        address: str = "127.0.0.1",
    ):
        self.kube, self.namespace, self.pod, self.port = kube, namespace, pod, port
        self.server = socket.create_server((address, local_port))
        self.local_port = self.server.getsockname()[1]
        self.errors: list[str] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            try:
                remote = self.kube.open_port(self.namespace, self.pod, self.port)
            except Exception as err:  # noqa: BLE001 - reported, the listener keeps serving
                self.errors.append(str(err))
                conn.close()
                continue
            done = threading.Barrier(2, action=lambda c=conn, r=remote: (c.close(), r.close()))
            for source, sink in ((conn, remote), (remote, conn)):
                args = (source, sink, done)
                threading.Thread(target=_pump, args=args, daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        self.server.close()


def _pump(source: Any, sink: Any, done: threading.Barrier) -> None:
    """Copy one direction; at its end half-close the sink; the last one closes both."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    try:
        done.wait(timeout=3600)
    except threading.BrokenBarrierError:
        pass
