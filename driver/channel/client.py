"""A training worker's end of the run's channel (see driver/channel/__init__.py).

One DEALER socket per worker process, shared by the training thread and the metrics
thread under a lock that is held while a frame moves or for one poll of at most
`SLICE_S`, never for a whole wait: a reply is awaited in short polls, and a reply that
arrives for another waiter is kept for it.
`send` is fire-and-forget (metrics batches); `request` and `reply` let a caller ask without
blocking (the preemption notice, polled after every step); `call` asks and waits. Nothing
blocks on a driver that is gone: messages queue up to ZeroMQ's high-water mark (1000), and
then sending raises ChannelError.
Replies come back in order on the one connection, so a `call("sync")` that returns means
every message sent before it has been handled.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any

import zmq

from driver.messaging import wire

MAX_BYTES = 64 << 20
"""The largest message either end takes (a batch of rows, a failure record with its log
tail and flight recorder); ZeroMQ drops the connection of a peer that sends more."""
USER = b"worker"
"""The ZMTP PLAIN username of a worker (the password is the run's token)."""
SLICE_S = 0.005
"""The longest a waiting caller holds the socket: a send from the other thread waits no longer."""


class ChannelError(RuntimeError):
    """The driver refused a call (an unknown method, a failing handler), or did not
    answer in time."""


@dataclass(frozen=True)
class ChannelAddress:
    """Where the driver's channel listens, and the run's token: what a worker needs."""

    endpoint: str
    token: str

    def connect(self, rank: int = 0) -> ChannelClient:
        return ChannelClient(self, rank)


class ChannelClient:
    """A worker's connection to the driver's channel."""

    def __init__(self, address: ChannelAddress, rank: int = 0):
        self.address, self.rank = address, int(rank)
        self.info = {"token": address.token}
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.maxmsgsize = MAX_BYTES
        self.sock.plain_username, self.sock.plain_password = USER, address.token.encode()
        self.sock.ipv6 = address.endpoint.startswith("tcp://[")
        self.sock.connect(address.endpoint)
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.waiting: set[int] = set()
        self.replies: dict[int, wire.Message] = {}

    def send(self, method: str, *args: Any) -> None:
        """A message the driver handles without answering."""
        self._send(0, method, args)

    def request(self, method: str, *args: Any) -> int:
        """Ask without waiting; the request's id, for `reply`."""
        rid = next(self.ids)
        with self.lock:
            self.waiting.add(rid)
        try:
            self._send(rid, method, args)
        except ChannelError:
            with self.lock:
                self.waiting.discard(rid)
            raise
        return rid

    def reply(self, rid: int, timeout_s: float = 0.0) -> tuple[bool, Any]:
        """(True, the answer) once request `rid`'s reply is in, waiting up to `timeout_s`;
        (False, None) if it is not yet. Raises ChannelError if the driver refused it."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                left = deadline - time.monotonic()
                if rid not in self.replies:
                    if self.sock.poll(max(0.0, min(left, SLICE_S)) * 1000):
                        self._take(self.sock.recv_multipart(copy=False))
                msg = self.replies.pop(rid, None)
                if msg is not None or left <= 0:
                    break
        if msg is None:
            return False, None
        if msg.kind == "err":
            raise ChannelError(f"{msg.code}: {msg.error}")
        return True, wire.decode(msg.body)

    def call(self, method: str, *args: Any, timeout_s: float = 30.0) -> Any:
        """Ask and wait up to `timeout_s`; the answer. Raises ChannelError."""
        rid = self.request(method, *args)
        try:
            done, value = self.reply(rid, timeout_s)
        finally:
            with self.lock:
                self.waiting.discard(rid)
        if not done:
            raise ChannelError(f"{method}: no answer from the driver in {timeout_s:g} s")
        return value

    def close(self) -> None:
        with self.lock:
            self.sock.close()

    def _send(self, rid: int, method: str, args: tuple) -> None:
        frames = wire.pack(wire.Message("req", id=rid, rank=self.rank, method=method,
                                        info=self.info, body=wire.encode(list(args))))  # fmt: skip
        try:
            with self.lock:
                self.sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:  # a driver gone for a long while: its queue is full
            raise ChannelError(f"{method}: the driver takes no more messages") from None

    def _take(self, frames: list) -> None:
        """Keep a reply for its waiter (lock held); drop one nobody waits for any more."""
        try:
            msg = wire.parse(frames, MAX_BYTES)
        except wire.WireError:
            return
        if msg.id in self.waiting:
            self.waiting.discard(msg.id)
            self.replies[msg.id] = msg
