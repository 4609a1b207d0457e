"""A worker's requests between arrival and service (worker.py): queued, held, cancelled.

A request taken in joins its rank's bounded FIFO (`routing.FairQueues`); the next one
served comes from the next rank in turn (round robin over ranks with work). A request that
finds its rank's queue full: policy "fail_fast" answers `queue_full` as soon as it is taken
in; policy "wait" holds it at the worker (in arrival order, at most `hold_bound` per rank)
until a slot frees or its deadline passes (then `timeout`): the caller blocks up to its
deadline and the worker never serves a held request ahead of other ranks' queued ones. A
cancel removes the request wherever it waits. `Queueing` is a part of `WorkerServer` (its
state is the worker's); `Item` is a request waiting at the worker.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from driver.aux.routing import admit
from driver.messaging.envelope import Message


class Queueing:
    """The `WorkerServer` methods that keep its waiting requests: admit, hold, pick next."""

    def _admit(self, item: Item) -> None:
        rank = item.msg.rank
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
        code, text = {
            "expire": ("timeout", "deadline passed before the worker got the request"),
            "refuse": ("queue_full", f"rank {rank}'s queue at the worker is full"),
        }[decision]
        self.counters[f"refused_{code}"] += 1
        self._reply(item.route, error_reply(item.msg.id, code, text))

    def _cancel(self, client: bytes, msg: Message) -> None:
        def match(item: Item) -> bool:
            return item.msg.id == msg.id and item.route[1].bytes == client

        with self.lock:
            taken = self.queues.remove(msg.rank, match)
            held = self.held.pop(msg.rank, None)
            if held:
                taken += [item for item in held if match(item)]
                kept = deque(item for item in held if not match(item))
                if kept:
                    self.held[msg.rank] = kept
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


class Item:
    """A request waiting at the worker: its route back, the message, its arrival time."""

    __slots__ = ("route", "msg", "arrived")

    def __init__(self, route: list[Any], msg: Message, arrived: float):
        self.route, self.msg, self.arrived = route, msg, arrived


def error_reply(request_id: int, code: str, text: str) -> Message:
    """The `err` message for a request (its id, the error code and text)."""
    return Message("err", request_id, code=code, error=text)
