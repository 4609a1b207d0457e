"""A worker's requests between arrival and service (worker.py): queued, held, cancelled.

A request taken in joins its rank's bounded FIFO (`routing.FairQueues`); the next one
served comes from the next rank in turn (round robin over ranks with work). A request that
finds its rank's queue full: policy "fail_fast" answers `queue_full` as soon as it is taken
in; policy "wait" holds it at the worker (in arrival order, at most `hold_bound` per rank)
until a slot frees or its deadline passes (then `timeout`): the caller blocks up to its
deadline and the worker never serves a held request ahead of other ranks' queued ones. A
cancel removes the request wherever it waits.

Each peer (a connection and the routing id at its head: a rank's client that calls the
worker directly, or one rank behind a proxy) has at most `max_peer_bytes` and
`MAX_PEER_REQUESTS` requests waiting or running at the worker (`PeerBooks`; one request is
always taken): beyond, `queue_full`, as a proxy answers a rank over its share; a request id
the peer has there already is a replay, dropped and counted. A proxy keeps its ranks within
the same bounds, so the books only ever refuse a direct caller. `Queueing` is a part of
`WorkerServer` (its state is the worker's); `Item` is a request waiting at the worker.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from driver.aux.routing import admit
from driver.messaging.envelope import Message

MAX_PEER_REQUESTS = 4096  # requests one peer may have at the worker (a proxy's per rank)


class Queueing:
    """The `WorkerServer` methods that keep its waiting requests: admit, hold, pick next."""

    def _admit(self, item: Item) -> None:
        rank = item.msg.rank
        refused = self.books.take(item.peer, item.msg.id, item.size)
        if refused == "replay":  # the first one is answered
            self.counters["refused_replay"] += 1
            return
        if refused:
            self.counters["refused_queue_full"] += 1
            text = f"rank {rank} {refused}"
            self._reply(item.route, error_reply(item.msg.id, "queue_full", text))
            return
        with self.lock:
            held = self.held.get(rank)
            full = self.queues.full(rank) or bool(held)  # held ones go first
            decision = admit(full, self.policy, item.arrived, item.msg.deadline)
            if decision == "hold" and held and len(held) >= self.hold_bound:
                decision = "refuse"
            if decision == "accept":
                self.queues.push(rank, item)
                return
            if decision == "hold":
                self.held.setdefault(rank, deque()).append(item)
                self.counters["held_total"] += 1
                return
        self.books.release(item.peer, item.msg.id)
        code, text = {
            "expire": ("timeout", "deadline passed before the worker got the request"),
            "refuse": ("queue_full", f"rank {rank}'s queue at the worker is full"),
        }[decision]
        self.counters[f"refused_{code}"] += 1
        self._reply(item.route, error_reply(item.msg.id, code, text))

    def _cancel(self, peer: tuple[bytes, bytes], msg: Message) -> None:
        def match(item: Item) -> bool:
            return item.msg.id == msg.id and item.peer == peer

        with self.lock:
            taken = self.queues.remove(msg.rank, match)
            held = self.held.pop(msg.rank, None)
            if held:
                taken += [item for item in held if match(item)]
                kept = deque(item for item in held if not match(item))
                if kept:
                    self.held[msg.rank] = kept
        for item in taken:
            self.books.release(peer, item.msg.id)
        self.counters["cancelled"] += len(taken)

    def _expire_held(self) -> None:
        now, expired = time.time(), []
        with self.lock:
            for rank, queue in list(self.held.items()):
                if any(item.msg.deadline <= now for item in queue):
                    expired += [item for item in queue if item.msg.deadline <= now]
                    kept = deque(item for item in queue if item.msg.deadline > now)
                    if kept:
                        self.held[rank] = kept
                    else:
                        del self.held[rank]
        for item in expired:
            self.books.release(item.peer, item.msg.id)
            self.counters["refused_timeout"] += 1
            self._reply(item.route, error_reply(item.msg.id, "timeout", "deadline passed in queue"))

    def _next(self) -> Item | None:
        with self.lock:
            popped = self.queues.pop()
            if popped is None:
                return None
            rank, item = popped
            held = self.held.get(rank)
            if held:
                self.queues.push(rank, held.popleft())
                if not held:
                    del self.held[rank]
            return item


class PeerBooks:
    """Per peer: the ids and bytes of its requests waiting or running at the worker."""

    def __init__(self, max_bytes: int, max_requests: int = MAX_PEER_REQUESTS):
        self.max_bytes, self.max_requests = max_bytes, max_requests
        self.peers: dict[tuple[bytes, bytes], tuple[dict[int, int], list[int]]] = {}

    def take(self, peer: tuple[bytes, bytes], rid: int, size: int) -> str | None:
        """Book request `rid` of `size` bytes; None when taken, else why not ("replay", or
        what the peer holds)."""
        books = self.peers.get(peer)
        if books is None:
            self.peers[peer] = ({rid: size}, [size])
            return None
        ids, total = books
        if rid in ids:
            return "replay"
        if len(ids) >= self.max_requests or total[0] + size > self.max_bytes:
            return f"holds {len(ids)} requests ({total[0]} bytes) at the worker"
        ids[rid] = size
        total[0] += size
        return None

    def release(self, peer: tuple[bytes, bytes], rid: int) -> None:
        books = self.peers.get(peer)
        if books is not None and rid in books[0]:
            books[1][0] -= books[0].pop(rid)
            if not books[0]:
                del self.peers[peer]

    def __len__(self) -> int:
        return len(self.peers)


class Item:
    """A request waiting at the worker: its route back, the message, its arrival time, and
    its peer (the route's two ids) and size for the peer's books."""

    __slots__ = ("route", "msg", "arrived", "peer", "size")

    def __init__(self, route: list[Any], msg: Message, arrived: float, size: int = 0):
        self.route, self.msg, self.arrived, self.size = route, msg, arrived, size
        self.peer = (route[0].bytes, route[1].bytes)


def error_reply(request_id: int, code: str, text: str) -> Message:
    """The `err` message for a request (its id, the error code and text)."""
    return Message("err", request_id, code=code, error=text)
