"""A proxy's workers (proxy.py): the set it connects to, their health, and what the ranks
are told of it.

A worker is live after it answers a ping; it is lost at once when its socket disconnects
or a send finds no route (and after `worker_timeout_s` of silence, proxy.py's heartbeat).
The requests a lost worker held are re-sent to another live worker (`on_worker_loss=
"retry"`, at most once, within their deadline) or answered `unavailable`. Whenever the
live count changes, the ranks heard from in the last minute get an unasked pong with it.
`WorkerSet` is a part of `ProxyServer` (its state is the proxy's); `Worker` is the proxy's
view of one worker.
"""

from __future__ import annotations

import time
from typing import Any

import zmq

from driver.messaging.envelope import Message, pack


class WorkerSet:
    """The `ProxyServer` methods that keep its workers: connected, live or lost."""

    def _apply_workers(self) -> None:
        with self.lock:
            wanted, self.wanted = self.wanted, None
        if wanted is None:
            return
        for address in [a for a in self.workers if a not in wanted]:
            worker = self.workers.pop(address)
            del self.by_id[worker.id]
            self._lose(worker, "removed")
            self.back.disconnect(address)
        for address in [a for a in wanted if a not in self.workers]:
            self.workers[address] = self.by_id[address.encode()] = Worker(address)
            self.back.setsockopt(zmq.CONNECT_ROUTING_ID, address.encode())
            self.back.connect(address)
        self.rr.set_keys(wanted)
        self._relive()

    def _on_event(self, event: dict[str, Any]) -> None:
        worker = self.workers.get(event["endpoint"].decode())
        if worker is None:
            return
        if event["event"] == zmq.EVENT_DISCONNECTED:
            self._lose(worker, "disconnected")
        else:
            self._ping(worker)

    def _ping(self, worker: Worker) -> None:
        try:
            frames = [worker.id, b"", *pack(Message("ping"))]
            self.back.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # not connected (yet): the next beat or handshake event pings again

    def _lose(self, worker: Worker, why: str) -> None:
        if worker.live:
            worker.live = False
            self._relive()
            self.counts["worker_lost"] += 1
            self._announce()
        keys, worker.inflight = worker.inflight, set()
        for key in keys:
            entry = self.inflight.get(key)
            if entry is None:
                continue
            entry.worker = None
            if self.policy == "retry" and entry.tries < 2 and entry.deadline > time.time():
                entry.tries += 1
                self.counts["retried"] += 1
                self._dispatch(entry)
            else:
                self._drop(key)
                self.counts["lost"] += 1
                text = f"worker {worker.address} {why} with the request in flight"
                self._answer(entry.client, entry.id, "unavailable", text)

    def _relive(self) -> None:
        self.live = [w for w in self.workers.values() if w.live]

    def _pong(self, request_id: int = 0) -> list[bytes]:
        # ranks with the same node key pass big arrays to our workers in shared memory
        same = bool(self.live) and all(w.node == self.node for w in self.live)
        info = {"live": self.live_workers(), "service": self.service, "node": self.node * same}
        return pack(Message("pong", request_id, info=info))

    def _announce(self) -> None:
        """Tell the ranks heard from in the last minute the new live worker count (their
        weight for this proxy) without waiting for their next ping."""
        now, frames = time.monotonic(), self._pong()
        for client, seen in list(self.clients.items()):
            if now - seen > 60.0:
                del self.clients[client]
                continue
            try:
                self.front.send_multipart([client, *frames], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass


class Worker:
    """The proxy's view of one worker."""

    def __init__(self, address: str):
        self.address, self.live, self.seen = address, False, time.monotonic()
        self.id = address.encode()  # its routing id at the proxy's worker socket
        self.node: str | None = None  # shm.node_key() of its host, from its pongs
        self.inflight: set[tuple[bytes, int]] = set()
