"""An AuxClient's requests (client.py): where each goes, and how each ends.

Requests go to the links (proxies, and workers on this node called directly) by smooth
weighted round robin (weights: `routing.link_weights`; the one weighted link, when there is
one, without a choice); a request that finds no link to send to is parked until one has a
weight or its deadline passes. A link that is lost gets weight 0 and its requests are
re-sent (up to `retries`) or fail with `AuxUnavailable`; a deadline passed fails a request
with `AuxTimeout` and cancels it where it went. `Requests` is a part of `AuxClient` (its
state is the client's), used under its lock.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from typing import TYPE_CHECKING

import zmq

from driver.aux.calls import ProxyLink
from driver.aux.errors import AuxError, AuxTimeout, AuxUnavailable
from driver.aux.routing import link_weights
from driver.messaging.multipart import NOBLOCK, send_frames

if TYPE_CHECKING:
    from driver.aux.calls import Pending


class Requests:
    """The `AuxClient` methods that send, re-send and settle requests."""

    def _set_proxies(self, proxies: dict[str, int], workers: list[str] | None = None) -> None:
        """Replace the proxies (and, given `workers`, the workers called directly)."""
        if workers is None:
            workers = [a for a, p in self.proxies.items() if p.direct]
        keep = set(proxies) | set(workers)
        for address in [a for a in self.proxies if a not in keep]:
            proxy = self.proxies.pop(address)
            self._proxy_down(proxy, "removed")
            proxy.close()
        for address, weight in proxies.items():
            if address in self.proxies:
                self.proxies[address].given = weight
            else:
                self.proxies[address] = ProxyLink(address, weight, self.context, self.max_bytes)
        for address in [a for a in workers if a not in self.proxies]:
            link = ProxyLink(address, 1, self.context, self.max_bytes, direct=True)
            self.proxies[address] = link
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
            frames = pending.frames(body, info)
            try:
                send_frames(proxy.sock, [*proxy.head, *frames] if proxy.direct else frames, NOBLOCK)
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
        links = self.proxies.values()
        local = {p.address: int(p.up and p.answering) for p in links if p.direct}
        remote = {p.address: p.weight() for p in links if not p.direct}
        self.wrr.set_weights(link_weights(local, remote, self.node_share))
        weighted = [a for a, w in self.wrr.weights.items() if w > 0]
        self.only = weighted[0] if len(weighted) == 1 else None

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
                what = "worker" if proxy.direct else "proxy"
                self._fail(pending, AuxUnavailable(f"{what} {proxy.address} {why} in flight"))

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
