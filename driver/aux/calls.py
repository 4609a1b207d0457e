"""The pieces of an AuxClient: a request's future, a request in flight, a proxy link.

`AuxClient` (client.py) is the only user; `AuxFuture` is what `AuxClient.submit` returns.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

import zmq

from driver.aux import shm
from driver.aux.errors import AuxCancelled, AuxError, AuxTimeout
from driver.messaging.envelope import MAX_ENVELOPE_BYTES, Message, pack
from driver.messaging.multipart import nbytes


class FutureOwner(Protocol):
    """What a future asks of its client (AuxClient, client.py)."""

    service: str
    settle_lock: threading.Lock

    def wait(self, future: AuxFuture, limit_s: float) -> bool: ...

    def _command(self, kind: str, value: Any) -> None: ...


HWM = 100_000  # messages queued per socket before a send would block


class AuxFuture:
    """The eventual reply of one request."""

    def __init__(self, client: FutureOwner, request_id: int, deadline: float):
        self.client, self.id, self.deadline = client, request_id, deadline
        self.settled = False
        self.event: threading.Event | None = None  # made for a waiter that is not the leader
        self.value: Any = None
        self.error: AuxError | None = None

    def result(self, timeout: float | None = None) -> Any:
        """The reply payload, or raise its AuxError; AuxTimeout if `timeout` passes first."""
        limit = self.deadline - time.time() + 5.0 if timeout is None else timeout
        if not self.settled and not self.client.wait(self, max(0.0, limit)):
            raise AuxTimeout(
                f"request {self.id}: no result within {limit:.3g} s", service=self.client.service
            )
        if self.error is not None:
            raise self.error
        return self.value

    def done(self) -> bool:
        return self.settled

    def wait(self, timeout: float) -> bool:
        """Block until settled (by another thread) or `timeout` passes."""
        with self.client.settle_lock:
            if self.settled:
                return True
            if self.event is None:
                self.event = threading.Event()
        return self.event.wait(timeout)

    def cancel(self) -> bool:
        """Give up on the request (the worker drops it if it has not started it)."""
        if not self._settle(error=AuxCancelled(f"request {self.id} cancelled")):
            return False
        self.client._command("cancel", self.id)
        return True

    def _settle(self, value: Any = None, error: AuxError | None = None) -> bool:
        with self.client.settle_lock:
            if self.settled:
                return False
            self.value, self.error, self.settled = value, error, True
            event = self.event
        if event is not None:
            event.set()
        return True


class Pending:
    """A request not yet answered: what to send, where it went, how often."""

    __slots__ = (
        "future", "method", "body", "rank", "proxy", "tries", "avoid",
        "big", "segs", "reply_seg", "leases", "shared",
    )  # fmt: skip

    def __init__(self, future: AuxFuture, method: str, body: list[Any], rank: int):
        self.future, self.method, self.body, self.rank = future, method, body, rank
        self.proxy: str | None = None
        self.tries = 0
        self.avoid: set[str] = set()
        # shared memory (shm.Lender): bytes of big arrays, segments in use, the reply's
        self.big = sum(n for n in map(nbytes, body[1:]) if n >= shm.MIN_BYTES)
        self.segs: list[Any] = []
        self.reply_seg: Any = None
        self.leases: dict[str, Any] | None = None
        self.shared = 0

    def frames(self, body: list[Any] | None = None, info: dict | None = None) -> list[Any]:
        f, body = self.future, self.body if body is None else body
        msg = Message("req", f.id, self.rank, self.method, f.deadline, info=info, body=body)
        return pack(msg)


class ProxyLink:
    """The client's view of one proxy, or (`direct`) of one worker on the client's node
    that it calls without a proxy: its socket, weight and in-flight requests. A direct
    link's messages start with an empty frame, where a proxy puts the rank's routing id
    (the worker answers to both)."""

    def __init__(self, address: str, given: int, context: zmq.Context, max_bytes: int,
                 direct: bool = False):  # fmt: skip
        self.address, self.given, self.direct = address, given, direct
        self.head: list[bytes] = [b""] if direct else []
        self.reported: int | None = None
        self.node: str | None = None  # shm.node_key() of its workers' host, from its pongs
        self.up, self.answering, self.seen, self.pinged = False, True, time.monotonic(), 0.0
        self.expecting: float | None = None  # since when we wait for an answer
        self.inflight: set[int] = set()
        self.sock = context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)
        self.sock.setsockopt(zmq.SNDHWM, HWM)
        self.sock.setsockopt(zmq.RCVHWM, HWM)
        self.sock.setsockopt(zmq.MAXMSGSIZE, max_bytes + MAX_ENVELOPE_BYTES)
        self.sock.setsockopt(zmq.RECONNECT_IVL, 100)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self.sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
        self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3000)
        self.monitor = self.sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
        )
        self.sock.connect(address)
        self.fd = self.sock.getsockopt(zmq.FD)  # readable when the socket may have news

    def weight(self) -> int:
        if not (self.up and self.answering):
            return 0
        return self.given if self.reported is None else self.reported

    def ping(self) -> None:
        self.pinged = time.monotonic()
        if self.up:
            self.expect()
        self._send(Message("ping"))

    def expect(self) -> None:
        """We now wait for an answer: silent from here for proxy_timeout_s means down."""
        if self.expecting is None:
            self.expecting = time.monotonic()

    def cancel(self, rid: int, rank: int) -> None:
        self._send(Message("cancel", rid, rank))

    def _send(self, msg: Message) -> None:
        try:
            self.sock.send_multipart([*self.head, *pack(msg)], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # not connected: the handshake event pings again

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(0)
        self.sock.close(0)
