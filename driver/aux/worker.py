"""A service worker: serves one Handler over a local socket to its proxy, fairly per rank.

The worker binds a ROUTER (usually `ipc:///...`); its proxy connects and forwards
requests `[client id, envelope, *body]`, and ranks on the worker's node connect and send
theirs directly as `[b"", envelope, *body]` (the same checks, queues and per-peer bounds
apply: worker_queues.py). One thread alternates: it takes in every message
that has arrived (answering pings and cancels, admitting each request into its rank's
bounded FIFO, `routing.FairQueues`), then serves one request from the next rank in turn
(round robin over ranks with work) and sends the reply. No thread handoff on the way, so
a request costs no more than its handler; while a handler call runs, pings wait (the
proxy does not count a worker busy with its requests as hung).

Nothing a peer sends ends the loop: a message that does not parse, or whose frames
together are over `max_message_bytes` (let go frame by frame as it is read), is answered
`protocol` and counted (`refused_<reason>`); an error while taking one in is counted
(`refused_internal`); a handler's error of any kind (SystemExit included) is the caller's
`remote` error; and should the loop fail anyway it is logged and run again on the same
socket (`messaging.serving.supervise`, `stats()["restarts"]`).

This module holds the worker's socket, its loop and the serving of a request; where a
request waits until served (its rank's queue, or held when that is full, under
`full_policy`) is worker_queues.py (`Queueing`, a part of `WorkerServer`: a mixin over the
one worker's state, so a request costs no extra call).

    server = WorkerServer(handler, "ipc:///tmp/enc-0.sock", queue_bound=64)
    address = server.start(); ...; server.stop()

The host calls `handler.setup()` and `handler.ready()` before `start()`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from typing import Any

import zmq
from zmq.backend import Socket as _RawSocket

from driver.aux import shm
from driver.aux.handler import Handler, RequestContext
from driver.aux.routing import FairQueues, admit
from driver.aux.shm_worker import Attached, Borrowed
from driver.aux.worker_queues import Item, PeerBooks, Queueing, error_reply
from driver.messaging.envelope import (
    MAX_ENVELOPE_BYTES,
    MAX_FRAMES,
    Message,
    WireError,
    pack,
    parse,
    peek_id,
)
from driver.messaging.multipart import NOBLOCK, Oversized, nbytes, recv_bounded, send_frames
from driver.messaging.payload import decode, encode
from driver.messaging.serving import supervise

log = logging.getLogger("driver.aux.worker")
DRAIN = 10_000  # messages taken in at most between two handler calls
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_events = _RawSocket.get
COUNTERS = (
    "served",
    "errors",
    "cancelled",
    "held_total",
    "expired_in_queue",
    *(f"refused_{r}" for r in ("garbage", "truncated", "oversized", "kind", "internal")),
    "refused_replay",
    "refused_queue_full",
    "refused_timeout",
    "restarts",
)


class WorkerServer(Queueing):
    """Serves `handler` at `address` (ipc://, inproc:// or tcp://; a tcp port may be *)."""

    def __init__(
        self,
        handler: Handler,
        address: str,
        *,
        queue_bound: int = 64,
        full_policy: str = "wait",
        hold_bound: int | None = None,
        max_message_bytes: int = 64 << 20,
        max_peer_bytes: int | None = None,
        torch: bool | None = None,
        context: zmq.Context | None = None,
    ):
        admit(False, full_policy, 0.0, 1.0)  # validates the policy name
        self.handler, self.address = handler, address
        # arrays sent as tensors reach the handler as tensors (default: the handler's say)
        self.torch = bool(getattr(handler, "torch_arrays", False)) if torch is None else torch
        self.policy, self.max_bytes = full_policy, max_message_bytes
        self.budget = max_message_bytes + MAX_ENVELOPE_BYTES + 512  # with the two routing ids
        self.hold_bound = hold_bound if hold_bound is not None else 16 * queue_bound
        self.queues = FairQueues(queue_bound)
        # per peer (a direct caller, or one rank behind a proxy): requests here, their bytes
        self.books = PeerBooks(max_message_bytes if max_peer_bytes is None else max_peer_bytes)
        self.held: dict[int, deque[Item]] = {}  # ranks with held requests only
        self.lock = threading.Lock()  # stats() reads from other threads
        self.context = context or zmq.Context.instance()
        self.running = threading.Event()
        self.threads: list[threading.Thread] = []
        self.counters: dict[str, Any] = defaultdict(int, dict.fromkeys(COUNTERS, 0))
        self.per_rank: dict[int, int] = defaultdict(int)
        self.wait_s = self.process_s = 0.0
        self.running_key: tuple[bytes, int] | None = None
        # ranks' segments mapped here (shm_worker.py): one at most a message's size and room
        self.attached = Attached(max_segment=max_message_bytes + (2 << 20))
        self.node = shm.node_key()

    def start(self) -> str:
        """Bind, start the I/O and handler threads; returns the bound address."""
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.SNDHWM, 100_000)
        self.router.setsockopt(zmq.RCVHWM, 100_000)
        self.router.setsockopt(zmq.MAXMSGSIZE, self.max_bytes + MAX_ENVELOPE_BYTES)
        self.router.setsockopt(zmq.RCVTIMEO, 50)  # an idle loop's wait for a message
        self.router.bind(self.address)
        self.address = self.router.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.running.set()
        thread = threading.Thread(target=self._run, name="aux-worker", daemon=True)
        thread.start()
        self.threads.append(thread)
        return self.address

    def stats(self) -> dict:
        """Counts and sums since start: served, errors, pending, wait/process seconds."""
        with self.lock:
            held = sum(len(q) for q in self.held.values())
            return {
                **self.counters,
                "pending": len(self.queues) + held,
                "held": held,
                "wait_s_sum": self.wait_s,
                "process_s_sum": self.process_s,
                "per_rank": dict(self.per_rank),
            }

    def stop(self) -> None:
        self.running.clear()
        for thread in self.threads:
            thread.join(5)
        self.threads.clear()

    # -- the loop: take in everything that arrived, then serve one request -------------------

    def _run(self) -> None:
        """The serving thread: the loop, run again if it fails; the socket closed at the end."""
        try:
            supervise(self._loop, self.running.is_set, self._restarted, "aux worker")
        finally:
            self.router.close(0)
            self.attached.close()

    def _restarted(self, err: BaseException) -> None:
        self.counters["restarts"] += 1

    def _loop(self) -> None:
        # One socket: an idle worker blocks in recv (up to RCVTIMEO) rather than in zmq_poll,
        # which would check the socket's mailbox twice per wake-up; whether more has arrived
        # is read from ZMQ_EVENTS (a failed non-blocking recv costs an exception).
        sock, queues = self.router, self.queues
        next_sweep = time.monotonic()
        while self.running.is_set():
            if not queues.size:
                self._take(sock, 0)  # or RCVTIMEO: look at the clock and the running flag
            for _ in range(DRAIN):  # every rank's arrivals queued before a pick
                if not _events(sock, _EVENTS) & _POLLIN or not self._take(sock, NOBLOCK):
                    break
            if self.held and time.monotonic() >= next_sweep:
                self._expire_held()
                next_sweep = time.monotonic() + 0.05
            item = self._next()
            if item is not None:  # released before the reply: a peer that has its reply
                reply = self._serve(item)  # finds its share free again
                self.books.release(item.peer, item.msg.id)
                self._reply(item.route, reply)

    def _take(self, sock: zmq.Socket, flags: int) -> bool:
        """Receive one message within the budget and take it in (a refusal is counted);
        False if none was waiting."""
        try:
            self._receive(recv_bounded(sock, self.budget, MAX_FRAMES + 3, flags, keep=3))
        except Oversized as err:
            self.counters["refused_oversized"] += 1
            text = f"oversized: {err}, limit {self.max_bytes}"
            self._reply(err.head[:2], error_reply(peek_id(err.head[2:]), "protocol", text))
        except zmq.Again:
            return False
        except Exception as err:  # noqa: BLE001 (a message must not end the loop)
            self.counters["refused_internal"] += 1
            if self.counters["refused_internal"] <= 3:
                log.error("aux worker: a message could not be taken in", exc_info=err)
        return True

    def _receive(self, frames: list[Any]) -> None:
        if len(frames) < 3:
            self.counters["refused_truncated"] += 1
            return
        route = frames[:2]
        try:
            msg = parse(frames[2:], self.max_bytes)
        except WireError as err:
            self.counters[f"refused_{err.reason}"] += 1
            self._reply(route, error_reply(peek_id(frames[2:]), "protocol", str(err)))
            return
        if msg.kind == "ping":
            info = {"pending": len(self.queues), "node": self.node}
            self._reply(route, Message("pong", msg.id, info=info))
        elif msg.kind == "cancel":
            self._cancel((route[0].bytes, route[1].bytes), msg)
        elif msg.kind == "req":
            self._admit(Item(route, msg, time.time(), sum(map(nbytes, frames[2:]))))
        else:
            self.counters["refused_kind"] += 1
            self._reply(route, error_reply(msg.id, "protocol", f"unexpected {msg.kind}"))

    def _reply(self, route: list[Any], msg: Message) -> None:
        send_frames(self.router, [*route, *pack(msg)])

    def _serve(self, item: Item) -> Message:
        msg, start = item.msg, time.time()
        self.wait_s += start - item.arrived
        if start >= msg.deadline:
            self.counters["expired_in_queue"] += 1
            return error_reply(msg.id, "timeout", "deadline passed in queue")
        shared = Borrowed(self.attached)  # the rank's shared memory, if it sent any
        try:
            payload = decode(msg.body, torch=self.torch, shm=shared.read)
            ctx = RequestContext(msg.rank, msg.id, msg.deadline)
            result = self.handler.handle(msg.method, payload, ctx)
            body = encode(result)
            del payload, result  # so that `kept` sees only what the handler holds
            offer = msg.info.get("rs") if msg.info else None
            if offer is not None:
                body = shared.reply(body, offer)
            size = sum(nbytes(frame) for frame in body)
            if size > self.max_bytes:  # the caller would drop its connection on it
                raise ValueError(f"reply of {size} bytes over the limit {self.max_bytes}")
            info = {"kept": 1} if shared.kept() else None
            reply = Message("rep", msg.id, body=body, info=info)
            self.counters["served"] += 1
            self.per_rank[msg.rank] += 1
        except WireError as err:
            self.counters["refused_" + err.reason] += 1
            reply = error_reply(msg.id, "protocol", str(err))
        except BaseException as err:  # noqa: BLE001 (the caller gets it as AuxRemoteError)
            self.counters["errors"] += 1
            reply = error_reply(msg.id, "remote", f"{type(err).__name__}: {err}")
        self.process_s += time.time() - start
        return reply
