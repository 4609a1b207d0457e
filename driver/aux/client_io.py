"""An AuxClient's reading (client.py): the leading caller's and the background thread's.

A caller waiting in `result()` becomes the leader (one at a time) and reads the proxies'
sockets itself until its own reply is in; other waiting threads wait for it to settle
theirs. The background thread keeps time (deadlines, re-sends, pings every `heartbeat_s`
of silence, connection events every `EVENT_S`), reads replies nobody waits on (every
`TICK_S`) and, between two leaders, those that other threads wait on. Whether a message
waits at a socket is read from `ZMQ_EVENTS` (a failed non-blocking recv costs an
exception); the sockets' `ZMQ_FD`s are polled, their monitors read, not polled.
`Reading` is a part of `AuxClient` (its state is the client's), used under its lock.
"""

from __future__ import annotations

import heapq
import os
import select
import time
from typing import TYPE_CHECKING, Any

import zmq
from zmq.backend import Socket as _RawSocket
from zmq.utils.monitor import recv_monitor_message

from driver.aux.errors import AuxProtocolError, from_code
from driver.messaging.envelope import WireError, parse
from driver.messaging.multipart import recv_frames
from driver.messaging.payload import decode

if TYPE_CHECKING:
    from driver.aux.calls import AuxFuture, ProxyLink

_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_events = _RawSocket.get

TICK_S = 0.02
EVENT_S = 0.01  # how often the proxies' connection monitors are read
IDLE_PING_S = 30.0  # an idle client's ping: the proxy keeps it on its list for 60 s


class Reading:
    """The `AuxClient` methods that read the proxies' sockets and keep time."""

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

    def _on_message(self, proxy: ProxyLink, frames: list[Any]) -> None:
        if proxy.direct:  # a worker's: after the empty frame a proxy would fill
            frames = frames[1:]
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

    def _heartbeat(self) -> None:
        """Pings cost the proxy: only while we wait on it (every `heartbeat_s` of silence),
        while requests wait for a proxy with no live worker (often), and every
        `IDLE_PING_S` otherwise (so the proxy keeps telling us of its worker count)."""
        now = time.monotonic()
        for proxy in list(self.proxies.values()):
            silent = proxy.expecting is not None and now - proxy.expecting > self.proxy_timeout_s
            silent = silent and not (proxy.direct and proxy.inflight)  # busy, not hung
            if proxy.up and proxy.answering and silent:
                self._proxy_down(proxy, f"silent for {self.proxy_timeout_s:g} s")
            waiting = proxy.inflight or (proxy.up and not proxy.answering)
            if waiting and now - max(proxy.seen, proxy.pinged) > self.heartbeat_s:
                proxy.ping()
            elif self.parked and proxy.reported == 0 and now - proxy.pinged > 0.1:
                proxy.ping()
            elif now - proxy.pinged > IDLE_PING_S:
                proxy.ping()
