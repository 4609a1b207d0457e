"""A proxy's requests (proxy.py): from a rank to a live worker and the reply back.

A rank's message is checked (`envelope.parse`) and a request forwarded round robin to a
live worker, skipping one that holds `SKEW` more requests than the least busy (a slower
worker would otherwise build a longer queue, and the ranks whose requests keep landing on
it would be served less); with no live worker it waits at the proxy, up to its deadline.
A worker's reply is routed by the request id at a fixed offset of its envelope
(`envelope.reply_id`); the rank's client checks the whole reply. `Forwarding` is a part of
`ProxyServer` (its state is the proxy's); `Entry` is a request in flight.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

import zmq

from driver.aux.routing import pick_worker
from driver.messaging.envelope import Message, WireError, pack, parse, peek_id, reply_id
from driver.messaging.multipart import NOBLOCK, nbytes, send_frames

if TYPE_CHECKING:
    from driver.aux.proxy_workers import Worker

SKEW = 4  # round robin skips a worker holding this many more requests than the least busy
MAX_CLIENT_REQUESTS = 4096  # requests one rank may have at the proxy at once


class Forwarding:
    """The `ProxyServer` methods that move requests and replies."""

    def _from_rank(self, frames: list[Any]) -> None:
        client = frames[0].bytes
        self.clients[client] = time.monotonic()
        try:
            msg = parse(frames[1:], self.max_bytes)
        except WireError as err:
            self.ledger.refuse(client, err.reason)
            self._answer(client, peek_id(frames[1:]), "protocol", str(err))
            return
        if msg.kind == "req":
            if msg.deadline <= time.time():
                self._answer(client, msg.id, "timeout", "deadline passed before the proxy")
                return
            if (client, msg.id) in self.inflight:  # a replay: the first one is answered
                self.ledger.refuse(client, "replay")
                return
            entry = Entry(client, frames[1:], msg.id, msg.rank, msg.deadline)
            if not self._hold(entry):
                return
            self.inflight[(client, msg.id)] = entry
            self._dispatch(entry)
        elif msg.kind == "cancel":
            entry = self._drop((client, msg.id))
            if entry is not None and entry.worker is not None:
                entry.worker.inflight.discard((client, msg.id))
                self._send_worker(entry.worker, frames)
            self.counts["cancelled"] += 1
        elif msg.kind == "ping":
            self.front.send_multipart([client, *self._pong(msg.id)])
        else:
            self.ledger.refuse(client, "kind")
            self._answer(client, msg.id, "protocol", f"unexpected {msg.kind} from a rank")

    def _hold(self, entry: Entry) -> bool:
        """Count `entry` against its rank's share of the proxy, or answer `queue_full`."""
        held = self.held.get(entry.client)
        if held is None:
            self.held[entry.client] = [1, entry.size]
            return True
        if held[0] < MAX_CLIENT_REQUESTS and held[1] + entry.size <= self.max_client_bytes:
            held[0] += 1
            held[1] += entry.size
            return True
        self.ledger.refuse(entry.client, "rank_full")
        text = f"rank {entry.rank} holds {held[0]} requests ({held[1]} bytes) at the proxy"
        self._answer(entry.client, entry.id, "queue_full", text)
        return False

    def _drop(self, key: tuple[bytes, int]) -> Entry | None:
        """Take a request off the proxy's books (answered, cancelled, expired or lost)."""
        entry = self.inflight.pop(key, None)
        if entry is not None:
            held = self.held.get(entry.client)
            if held is not None:
                held[0] -= 1
                held[1] -= entry.size
                if held[0] <= 0:
                    del self.held[entry.client]
        return entry

    def _from_worker(self, frames: list[Any]) -> None:
        worker = self.by_id.get(frames[0].bytes)
        if worker is None or len(frames) < 3:
            return
        worker.seen = time.monotonic()
        client = frames[1].bytes
        if not client:  # a pong for the proxy itself: where the worker runs
            try:
                worker.node = (parse(frames[2:], self.max_bytes).info or {}).get("node")
            except WireError:
                self.ledger.refuse(worker.id, "from_worker")
        if not worker.live:
            worker.live = True
            self._relive()
            self.counts["worker_up"] += 1
            self._announce()
            waiting, self.waiting = self.waiting, deque()
            for entry in waiting:
                if (entry.client, entry.id) in self.inflight:
                    self._dispatch(entry)
        if not client:
            return
        try:
            rid = reply_id(frames[2:])
        except WireError:
            self.ledger.refuse(worker.id, "from_worker")
            return
        entry = self._drop((client, rid))
        if entry is not None and entry.worker is not None:
            entry.worker.inflight.discard((client, rid))
        self.counts["replied"] += 1
        try:
            send_frames(self.front, frames[1:], NOBLOCK)
        except zmq.ZMQError:
            self.counts["unroutable"] += 1  # the rank is gone, or its queue is full

    def _dispatch(self, entry: Entry) -> None:
        if len(self.live) == 1:  # the common case on small nodes: no choice to make
            worker = self.live[0]
            if self._send_worker(worker, [entry.client, *entry.frames]):
                entry.worker = worker
                worker.inflight.add((entry.client, entry.id))
                self.counts["forwarded"] += 1
                return
        tried: set[str] = set()
        while True:
            live = {w.address: len(w.inflight) for w in self.live if w.address not in tried}
            address = pick_worker(self.rr, live, SKEW)
            if address is None:  # wait for a worker to come (back), up to the deadline
                entry.worker = None
                self.waiting.append(entry)
                self.counts["waited"] += 1
                return
            worker = self.workers[address]
            if self._send_worker(worker, [entry.client, *entry.frames]):
                entry.worker = worker
                worker.inflight.add((entry.client, entry.id))
                self.counts["forwarded"] += 1
                return
            tried.add(address)

    def _send_worker(self, worker: Worker, frames: list[Any]) -> bool:
        try:
            send_frames(self.back, [worker.id, *frames], NOBLOCK)
            return True
        except zmq.Again:
            return False  # its queue is full: try another
        except zmq.ZMQError:
            self._lose(worker, "unreachable")
            return False

    def _answer(self, client: bytes, request_id: int, code: str, text: str) -> None:
        self.counts[f"answered_{code}"] += 1
        msg = Message("err", request_id, code=code, error=text)
        self.front.send_multipart([client, *pack(msg)])


class Entry:
    """A request the proxy has forwarded and not yet seen answered."""

    __slots__ = ("client", "frames", "id", "rank", "deadline", "worker", "tries", "size")

    def __init__(self, client: bytes, frames: list[Any], rid: int, rank: int, deadline: float):
        self.client, self.frames, self.id, self.rank, self.deadline = (
            client,
            frames,
            rid,
            rank,
            deadline,
        )
        self.worker: Worker | None = None
        self.tries = 1
        self.size = sum(map(nbytes, frames))
