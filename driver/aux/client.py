"""A training rank's client of one auxiliary service: calls with deadlines, over its proxies.

    client = AuxClient("encoder", rank, {"tcp://10.0.0.5:41000": 4, "tcp://10.0.0.6:41000": 4})
    emb = client.call("encode", {"tokens": tokens})["emb"]          # numpy array
    AuxClient("encoder", rank, {"tcp://10.0.0.6:41000": 4},          # another node's proxy,
              workers=["ipc:///tmp/aux-r1/encoder-0.sock"])         # this node's worker
    future = client.submit("encode", {"tokens": tokens}); ...; future.result()

Thread-safe: any thread may call or submit. The sockets (a DEALER per proxy) and the
request state are guarded by one lock and used by whichever thread holds it: `submit`
sends from the caller's thread, a caller waiting in `result()` reads the sockets itself (one
such "leader" at a time; others wait for it to settle their futures), and a background
thread keeps time (deadlines, pings, connection events), reads replies nobody waits on
(every `TICK_S`) and, between two leaders, those that other threads wait on. A call thus
crosses no thread of ours on its way out or back, and `submit` wakes nobody.

Requests go to the proxies by smooth weighted round robin, weight = the proxy's live worker
count (the given count until its first pong reports one). The service's `workers` on the
caller's own node are called directly, without the proxy hop (a link each, the same
messages; the worker's queues, limits and checks apply as through a proxy), and their
node's proxy is left out: the node keeps its requests while its live workers are at least
`node_share` (its ranks ÷ all ranks) of the service's live workers, and sends the rest to
the other nodes' proxies (`routing.link_weights`). A link whose
connection drops (a proxy or worker process that died), or that answers nothing (not even
a ping) for `proxy_timeout_s` (a direct worker: while it holds none of our requests, as a
busy worker answers between two handler calls), gets weight 0 and its in-flight requests
are re-sent to another link (up to `retries` re-sends, within the deadline) or fail with
AuxUnavailable; it gets its weight back when it answers (a worker restarted on its address
is reconnected by ZeroMQ). With no link to send to, a request waits for one up to its
deadline.

Every call ends with a reply or a typed `AuxError` (errors.py), never silently: a deadline
is enforced here whatever the proxies do. A re-sent request may run twice (at least once).

This module holds the client's state and the callers' side; the reading (the leader's and
the background thread's, `TICK_S`) is client_io.py (`Reading`), where requests go and how
they end client_requests.py (`Requests`): both are parts of `AuxClient` (mixins over the
one client's state, so a call costs no extra function call).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import deque
from typing import Any

import zmq

from driver.aux.calls import AuxFuture, Pending, ProxyLink
from driver.aux.client_io import Reading
from driver.aux.client_requests import Requests
from driver.aux.errors import AuxProtocolError, AuxUnavailable
from driver.aux.routing import SmoothWeightedRoundRobin
from driver.aux.shm_client import Lender
from driver.messaging.multipart import nbytes
from driver.messaging.payload import encode


class AuxClient(Reading, Requests):
    """Calls `service` for training rank `rank` through `proxies` ({address: live workers})."""

    def __init__(
        self,
        service: str,
        rank: int,
        proxies: dict[str, int],
        *,
        workers: list[str] | tuple[str, ...] = (),
        node_share: float | None = None,
        deadline_s: float = 30.0,
        retries: int = 1,
        max_message_bytes: int = 64 << 20,
        heartbeat_s: float = 1.0,
        proxy_timeout_s: float = 5.0,
        torch: bool = False,
        shm_bytes: int = 1 << 30,
        context: zmq.Context | None = None,
    ):
        self.torch = torch  # arrays sent as tensors come back as tensors
        self.node_share = node_share  # this node's share of the callers (link_weights)
        self.service, self.rank, self.deadline_s, self.retries = service, rank, deadline_s, retries
        self.max_bytes, self.heartbeat_s, self.proxy_timeout_s = (
            max_message_bytes,
            heartbeat_s,
            proxy_timeout_s,
        )
        self.context = context or zmq.Context.instance()
        self.ids = itertools.count(1)
        self.settle_lock = threading.Lock()
        self.io = threading.Lock()  # sockets and request state: held by whoever moves them
        self.leader = False  # a caller waits in result() and reads the sockets itself
        self.watching = False  # the background thread polls the proxies' sockets
        self.waiters = 0  # threads in result() that are not the leader
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.version = 0  # of the proxy set: pollers are rebuilt when it changes
        self.lender = Lender(shm_bytes)  # big arrays through shared memory on one node
        self.counts: dict[str, int] = {"sent": 0, "replies": 0, "resent": 0}
        self.errors: dict[str, int] = {}
        self.proxies: dict[str, ProxyLink] = {}
        self.wrr = SmoothWeightedRoundRobin()
        self.inflight: dict[int, Pending] = {}
        self.parked: deque[Pending] = deque()
        self.later: list[tuple[float, int, Pending]] = []  # re-sends after a back-off
        self.deadlines: list[tuple[float, int]] = []
        self.closed = self.shut = False
        self.only: str | None = None  # the one proxy with a weight, when there is one
        with self.io:
            self._set_proxies(dict(proxies), list(workers))
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.name = f"aux-client-{service}"
        self.thread.start()

    # -- caller side -------------------------------------------------------------------------

    def call(self, method: str, payload: dict, deadline_s: float | None = None) -> Any:
        """Send and wait for the reply; raises an AuxError subclass."""
        return self.submit(method, payload, deadline_s).result()

    def submit(self, method: str, payload: dict, deadline_s: float | None = None) -> AuxFuture:
        """Send without waiting; the future settles by the deadline at the latest (its
        reply is read by `result()`, or within `TICK_S` by the background thread)."""
        deadline = time.time() + (self.deadline_s if deadline_s is None else deadline_s)
        future = AuxFuture(self, next(self.ids), deadline)
        try:
            body = encode(payload)
        except TypeError as err:
            raise AuxProtocolError(str(err), service=self.service) from None
        size = sum(nbytes(frame) for frame in body)
        if size > self.max_bytes:
            raise AuxProtocolError(
                f"request of {size} bytes over the limit {self.max_bytes}", service=self.service
            )
        with self.io:
            if self.closed:
                raise AuxUnavailable("client closed", service=self.service)
            self._dispatch(Pending(future, method, body, self.rank))
            self._drain_all()  # a send may have taken the signal of a reply
        return future

    def set_proxies(self, proxies: dict[str, int]) -> None:
        """Replace the proxy set and their weights (live worker counts); the workers called
        directly stay."""
        self._command("proxies", dict(proxies))
        self._wake()  # the background thread polls the new set

    def stats(self) -> dict:
        proxies = list(self.proxies.values())
        return {
            **self.counts,
            "errors": dict(self.errors),
            "inflight": len(self.inflight),
            "parked": len(self.parked),
            "proxies": {
                p.address: {
                    "weight": self.wrr.weights.get(p.address, 0),
                    "up": p.up,
                    "direct": p.direct,
                }
                for p in proxies
            },  # fmt: skip
        }

    def close(self) -> None:
        """Stop; requests still pending fail with AuxUnavailable."""
        if self.closed:
            return
        with self.io:
            self.closed = True
        self._wake()
        self.thread.join(5)
        os.close(self.wake_r)
        os.close(self.wake_w)

    def _command(self, kind: str, value: Any) -> None:
        with self.io:
            if self.shut:
                return
            if kind == "cancel":
                self._cancel(value)
            elif kind == "proxies":
                self._set_proxies(value)
            self._drain_all()

    def _wake(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # woken already (the pipe is full), or closed


__all__ = ["AuxClient", "AuxFuture"]
