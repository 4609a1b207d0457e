"""A training rank's client of one auxiliary service: calls with deadlines, over its proxies.

    client = AuxClient("encoder", rank, {"tcp://10.0.0.5:41000": 4, "tcp://10.0.0.6:41000": 4})
    emb = client.call("encode", {"tokens": tokens})["emb"]          # numpy array
    future = client.submit("encode", {"tokens": tokens}); ...; future.result()

Thread-safe: any thread may call or submit. The sockets (a DEALER per proxy) and the
request state are guarded by one lock and used by whichever thread holds it: `submit`
sends from the caller's thread, a caller waiting in `result()` reads the sockets itself (one
such "leader" at a time; others wait for it to settle their futures), and a background
thread keeps time (deadlines, pings, connection events), reads replies nobody waits on
(every `TICK_S`) and, between two leaders, those that other threads wait on. A call thus
crosses no thread of ours on its way out or back, and `submit` wakes nobody.

Requests go to the proxies by smooth weighted round robin, weight = the proxy's live worker
count (the given count until its first pong reports one). A proxy whose
connection drops, or that answers nothing (not even a ping) for `proxy_timeout_s`, gets
weight 0 and its in-flight requests are re-sent to another proxy (up to `retries` re-sends,
within the deadline) or fail with AuxUnavailable; it gets its weight back when it answers.
With no proxy to send to, a request waits for one up to its deadline.

Every call ends with a reply or a typed `AuxError` (errors.py), never silently: a deadline
is enforced here whatever the proxies do. A re-sent request may run twice (at least once).
"""

from __future__ import annotations

import heapq
import itertools
import os
import select
import threading
import time
from collections import deque
from typing import Any

import zmq
from zmq.backend import Socket as _RawSocket
from zmq.utils.monitor import recv_monitor_message

from driver.aux.calls import AuxFuture, Pending, ProxyLink
from driver.aux.envelope import WireError, parse
from driver.aux.errors import (
    AuxError,
    AuxProtocolError,
    AuxTimeout,
    AuxUnavailable,
    from_code,
)
from driver.aux.multipart import NOBLOCK, nbytes, recv_frames, send_frames
from driver.aux.payload import decode, encode
from driver.aux.routing import SmoothWeightedRoundRobin
from driver.aux.shm_client import Lender

_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_events = _RawSocket.get

TICK_S = 0.02
EVENT_S = 0.01  # how often the proxies' connection monitors are read
IDLE_PING_S = 30.0  # an idle client's ping: the proxy keeps it on its list for 60 s


class AuxClient:
    """Calls `service` for training rank `rank` through `proxies` ({address: live workers})."""

    def __init__(
        self,
        service: str,
        rank: int,
        proxies: dict[str, int],
        *,
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
            self._set_proxies(dict(proxies))
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
        """Replace the proxy set and their weights (live worker counts)."""
        self._command("proxies", dict(proxies))
        self._wake()  # the background thread polls the new set

    def stats(self) -> dict:
        proxies = list(self.proxies.values())
        return {
            **self.counts,
            "errors": dict(self.errors),
            "inflight": len(self.inflight),
            "parked": len(self.parked),
            "proxies": {p.address: {"weight": p.weight(), "up": p.up} for p in proxies},
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

    def wait(self, future: AuxFuture, limit_s: float) -> bool:
        """Block until `future` settles or `limit_s` passes (False). The first waiter leads:
        it reads the sockets itself until its own reply is in. Others wait for the leader
        to settle theirs; when it leaves, the background thread reads for them until one
        of them leads."""
        end = time.monotonic() + limit_s
        while not future.settled:
            with self.io:
                lead = not self.leader and not self.shut
                self.leader = self.leader or lead
                self.waiters += not lead
            if lead:
                try:
                    self._lead(future, end)
                finally:
                    with self.io:
                        self.leader = False
                        others = self.waiters > 0
                    if others:
                        self._wake()
                return future.settled
            try:
                left = end - time.monotonic()
                if left <= 0 or future.wait(min(left, TICK_S)):
                    return future.settled
            finally:
                with self.io:
                    self.waiters -= 1
        return True

    def _lead(self, future: AuxFuture, end: float) -> None:
        poller, version = None, -1
        while True:
            with self.io:
                if future.settled or self.shut:
                    return
                self._timers(time.time())  # (may re-send: a send can take a reply's signal)
                self._drain_all()
                if future.settled:
                    return
                if version != self.version:
                    poller, version = select.poll(), self.version
                    for proxy in self.proxies.values():
                        poller.register(proxy.fd, select.POLLIN)
            left = end - time.monotonic()
            if left <= 0:
                return
            poller.poll(min(left, TICK_S) * 1000)

    # -- background thread -------------------------------------------------------------------

    def _loop(self) -> None:
        poller, version, watching = None, -1, None
        next_beat = next_events = 0.0
        try:
            while True:
                with self.io:
                    if self.closed:
                        return
                    self._drain_all()
                    self._timers(time.time())
                    if time.monotonic() >= next_events:  # monitors are not polled: see proxy.py
                        self._events()
                        next_events = time.monotonic() + EVENT_S
                    if time.monotonic() >= next_beat:
                        self._heartbeat()
                        next_beat = time.monotonic() + 0.05
                    self._drain_all()  # pings may have taken the signal of a reply
                    self.watching = not self.leader and self.waiters > 0
                    if (version, watching) != (self.version, self.watching):
                        version, watching, poller = self.version, self.watching, select.poll()
                        poller.register(self.wake_r, select.POLLIN)
                        for proxy in self.proxies.values() if watching else ():
                            poller.register(proxy.fd, select.POLLIN)
                poller.poll(TICK_S * 1000)
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
        finally:
            with self.io:
                self.watching = False
                self._shutdown()

    def _drain_all(self) -> None:
        """Read every message waiting at any proxy's socket (ZMQ_EVENTS says which)."""
        for proxy in self.proxies.values():
            sock = proxy.sock
            for _ in range(1024):
                if not _events(sock, _EVENTS) & _POLLIN:
                    break
                self._on_message(proxy, recv_frames(sock))

    def _events(self) -> None:
        """Connections to the proxies made or lost (read every EVENT_S, not polled)."""
        for proxy in list(self.proxies.values()):
            while proxy.monitor.poll(0):
                self._on_event(proxy, recv_monitor_message(proxy.monitor, zmq.NOBLOCK))

    def _set_proxies(self, proxies: dict[str, int]) -> None:
        for address in [a for a in self.proxies if a not in proxies]:
            proxy = self.proxies.pop(address)
            self._proxy_down(proxy, "removed")
            proxy.close()
        for address, weight in proxies.items():
            if address in self.proxies:
                self.proxies[address].given = weight
            else:
                self.proxies[address] = ProxyLink(address, weight, self.context, self.max_bytes)
        self.version += 1
        self._reweigh()

    def _reweigh(self) -> None:
        self._reweigh_only()
        self._unpark()

    def _unpark(self) -> None:
        if self.parked and any(p.weight() for p in self.proxies.values()):
            parked, self.parked = self.parked, deque()
            for pending in parked:
                self._dispatch(pending)

    def _dispatch(self, pending: Pending) -> None:
        future = pending.future
        if future.done():
            return
        if future.deadline <= time.time():
            self._fail(pending, AuxTimeout(f"request {future.id}: deadline passed"))
            return
        busy: set[str] = set()
        while True:
            address = self.only if not busy else None  # the one proxy with a weight, if so
            address = address or self.wrr.next(exclude=pending.avoid | busy)
            address = address or self.wrr.next(exclude=busy)
            if address is None:  # no proxy now, or all their send queues are full
                self.parked.append(pending)
                return
            proxy = self.proxies[address]
            body, info = self.lender.body(pending, self.lender.local(proxy.node))
            try:
                send_frames(proxy.sock, pending.frames(body, info), NOBLOCK)
            except zmq.Again:  # send queue full (a lost connection comes as an event)
                busy.add(address)
                continue
            pending.proxy = address
            proxy.expect()
            proxy.inflight.add(future.id)
            self.inflight[future.id] = pending
            heapq.heappush(self.deadlines, (future.deadline, future.id))
            self.counts["sent"] += 1
            return

    def _reweigh_only(self) -> None:
        self.wrr.set_weights({a: p.weight() for a, p in self.proxies.items()})
        weighted = [a for a, w in self.wrr.weights.items() if w > 0]
        self.only = weighted[0] if len(weighted) == 1 else None

    def _on_message(self, proxy: ProxyLink, frames: list[Any]) -> None:
        proxy.seen = time.monotonic()
        proxy.expecting = proxy.seen if proxy.inflight else None
        if not proxy.answering:
            proxy.answering = True
            self._reweigh()
        try:
            msg = parse(frames, self.max_bytes)
        except WireError:
            self.errors["bad_reply"] = self.errors.get("bad_reply", 0) + 1
            return
        if msg.kind == "pong":
            proxy.node = (msg.info or {}).get("node")
            live = (msg.info or {}).get("live")
            if isinstance(live, int) and live != proxy.reported:
                proxy.reported = live
                self._reweigh()
            return
        pending = self.inflight.pop(msg.id, None)
        if pending is None:
            return  # answered already (a re-send's twin, a cancelled or expired request)
        proxy.inflight.discard(msg.id)
        if msg.kind == "rep":
            try:
                value = decode(msg.body, torch=self.torch, shm=self.lender.reader(pending))
            except WireError as err:
                self._fail(pending, AuxProtocolError(f"reply: {err}"))
                return
            self.lender.learn(pending, msg.body)
            self.lender.settle(pending, msg.info or {})
            self.counts["replies"] += 1
            pending.future._settle(value=value)
        elif msg.code == "unavailable" and pending.tries < self.retries:
            pending.tries += 1
            pending.avoid.add(proxy.address)
            left = max(0.0, pending.future.deadline - time.time())
            delay = min(0.05 * 2**pending.tries, 1.0, left)
            heapq.heappush(self.later, (time.time() + delay, msg.id, pending))
        else:
            self._fail(pending, from_code(msg.code or "error", msg.error))

    def _on_event(self, proxy: ProxyLink, event: dict[str, Any]) -> None:
        if event["event"] == zmq.EVENT_DISCONNECTED:
            self._proxy_down(proxy, "disconnected")
        elif event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            proxy.up, proxy.answering, proxy.seen = True, True, time.monotonic()
            proxy.ping()
            self._reweigh()

    def _proxy_down(self, proxy: ProxyLink, why: str) -> None:
        if why == "disconnected":
            proxy.up = False
        else:
            proxy.answering = False
        proxy.reported, proxy.expecting = None, None
        self._reweigh_only()
        ids, proxy.inflight = proxy.inflight, set()
        for rid in sorted(ids):
            pending = self.inflight.pop(rid, None)
            if pending is None:
                continue
            if pending.tries < self.retries:
                pending.tries += 1
                pending.avoid.add(proxy.address)
                self.counts["resent"] += 1
                self._dispatch(pending)
            else:
                self._fail(pending, AuxUnavailable(f"proxy {proxy.address} {why} in flight"))

    def _timers(self, now: float) -> None:
        while self.later and self.later[0][0] <= now:
            _, _, pending = heapq.heappop(self.later)
            self.counts["resent"] += 1
            self._dispatch(pending)
        while self.deadlines and self.deadlines[0][0] <= now:
            _, rid = heapq.heappop(self.deadlines)
            pending = self.inflight.pop(rid, None)
            if pending is not None:
                self.proxies[pending.proxy].inflight.discard(rid)
                self.proxies[pending.proxy].cancel(rid, self.rank)
                self._fail(pending, AuxTimeout(f"request {rid}: no reply by the deadline"))
        self._unpark()
        if self.parked:
            keep: deque[Pending] = deque()
            for pending in self.parked:
                if pending.future.deadline <= now:
                    self._fail(pending, AuxUnavailable("no live proxy before the deadline"))
                else:
                    keep.append(pending)
            self.parked = keep

    def _heartbeat(self) -> None:
        """Pings cost the proxy: only while we wait on it (every `heartbeat_s` of silence),
        while requests wait for a proxy with no live worker (often), and every
        `IDLE_PING_S` otherwise (so the proxy keeps telling us of its worker count)."""
        now = time.monotonic()
        for proxy in list(self.proxies.values()):
            silent = proxy.expecting is not None and now - proxy.expecting > self.proxy_timeout_s
            if proxy.up and proxy.answering and silent:
                self._proxy_down(proxy, f"silent for {self.proxy_timeout_s:g} s")
            waiting = proxy.inflight or (proxy.up and not proxy.answering)
            if waiting and now - max(proxy.seen, proxy.pinged) > self.heartbeat_s:
                proxy.ping()
            elif self.parked and proxy.reported == 0 and now - proxy.pinged > 0.1:
                proxy.ping()
            elif now - proxy.pinged > IDLE_PING_S:
                proxy.ping()

    def _cancel(self, rid: int) -> None:
        pending = self.inflight.pop(rid, None)
        if pending is not None:
            self.lender.settle(pending, None)
        if pending is not None and pending.proxy in self.proxies:
            self.proxies[pending.proxy].inflight.discard(rid)
            self.proxies[pending.proxy].cancel(rid, self.rank)

    def _fail(self, pending: Pending, error: AuxError) -> None:
        self.lender.settle(pending, None)
        if not error.service:
            error.service = self.service
            error.args = (f"{self.service}: {error}",)
        if pending.future._settle(error=error):
            self.errors[error.code] = self.errors.get(error.code, 0) + 1

    def _shutdown(self) -> None:
        self.shut = True
        closing = AuxUnavailable("client closed")
        for pending in [*self.inflight.values(), *self.parked, *(p for *_, p in self.later)]:
            self._fail(pending, closing)
        self.inflight.clear()
        self.parked.clear()
        self.later.clear()
        for proxy in self.proxies.values():
            proxy.close()
        self.lender.close()


__all__ = ["AuxClient", "AuxFuture"]
