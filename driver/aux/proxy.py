"""A service's proxy on one node: ranks connect over TCP, workers over local IPC.

One thread polls a ROUTER bound on TCP (training ranks' `AuxClient`s), a ROUTER connected
to every worker (`WorkerServer`, addressed by its endpoint string) and that socket's
monitor. Requests are checked (`envelope.parse`: envelope, frame count and lengths, declared
size; a frame over `max_message_bytes` is refused by ZeroMQ before it is read, and the
peer disconnected) and forwarded round robin to live workers, skipping a worker that holds
`SKEW` more requests than the least busy one (a slower worker would otherwise build a
longer queue, and the ranks whose requests keep landing on it would be served less);
replies go back to the rank.

Worker health: a worker is live after it answers a ping. It is dead at once when its
socket disconnects (the process died) or a send finds no route, and after
`worker_timeout_s` without a pong while it holds none of our requests (hung). A dead
worker gets no requests; the ones it held are re-sent to another live worker
(`on_worker_loss="retry"`, at most once, within their deadline) or answered `unavailable`
("error"). ZeroMQ reconnects to the same address, and the worker is live again after its
next pong. A request that finds no live worker waits at the proxy until one is live or its
deadline passes (then `timeout`). Whenever its live worker count changes, the proxy tells
the ranks it heard from in the last minute (a pong they did not ask for), so their weights
follow at once; a proxy with 0 gets no requests.

This module holds the proxy's sockets, its loop and timers; the requests' path is
proxy_requests.py (`Forwarding`, `SKEW`), the workers' set and health proxy_workers.py
(`WorkerSet`): both are parts of `ProxyServer` (mixins over the one proxy's state, so a
message costs no extra call).

    proxy = ProxyServer("encoder", ["ipc:///tmp/enc-0.sock"]); address = proxy.start()
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque

import zmq
from zmq.backend import Socket as _RawSocket
from zmq.utils.monitor import recv_monitor_message

from driver.aux import shm
from driver.aux.proxy_requests import Entry, Forwarding
from driver.aux.proxy_workers import Worker, WorkerSet
from driver.aux.routing import RoundRobin
from driver.messaging.envelope import MAX_ENVELOPE_BYTES
from driver.messaging.multipart import recv_frames

LOSS_POLICIES = ("retry", "error")
COUNTERS = (
    "forwarded",
    "replied",
    "retried",
    "lost",
    "waited",
    "expired",
    "cancelled",
    "worker_up",
    "worker_lost",
    "rank_disconnects",
    "unroutable",
)
HWM = 100_000  # messages queued per peer before a send would block
EVENT_S = 0.01  # how often the monitor sockets are read
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_events = _RawSocket.get


class ProxyServer(Forwarding, WorkerSet):
    """Forwards `service` requests from ranks to `workers` (their bound addresses)."""

    def __init__(
        self,
        service: str,
        workers: list[str],
        *,
        host: str = "127.0.0.1",
        max_message_bytes: int = 64 << 20,
        bind: str | None = None,
        on_worker_loss: str = "retry",
        heartbeat_s: float = 0.5,
        worker_timeout_s: float = 5.0,
        context: zmq.Context | None = None,
    ):
        if on_worker_loss not in LOSS_POLICIES:
            raise ValueError(f"on_worker_loss {on_worker_loss!r}: expected {LOSS_POLICIES}")
        self.service, self.max_bytes = service, max_message_bytes
        self.bind_to = bind or f"tcp://{host}:*"
        self.policy, self.heartbeat_s, self.worker_timeout_s = (
            on_worker_loss,
            heartbeat_s,
            worker_timeout_s,
        )
        self.context = context or zmq.Context.instance()
        self.workers: dict[str, Worker] = {}
        self.by_id: dict[bytes, Worker] = {}  # the same workers by routing id
        self.live: list[Worker] = []  # live workers, in round robin order
        self.rr = RoundRobin()
        self.wanted: list[str] | None = list(workers)
        self.lock = threading.Lock()
        self.running = threading.Event()
        self.inflight: dict[tuple[bytes, int], Entry] = {}
        self.waiting: deque[Entry] = deque()  # requests that found no live worker
        self.clients: dict[bytes, float] = {}  # ranks heard from lately: told of changes
        self.counts: dict[str, int] = defaultdict(int, dict.fromkeys(COUNTERS, 0))
        self.refused: dict[str, int] = defaultdict(int)
        self.thread: threading.Thread | None = None
        self.address = ""
        self.node = shm.node_key()

    def start(self) -> str:
        """Bind the ranks' socket, connect the workers, start the loop; "tcp://host:port"."""
        self.front = self.context.socket(zmq.ROUTER)
        self.front.setsockopt(zmq.LINGER, 0)
        self.front.setsockopt(zmq.SNDHWM, HWM)
        self.front.setsockopt(zmq.RCVHWM, HWM)
        self.front.setsockopt(zmq.MAXMSGSIZE, self.max_bytes + MAX_ENVELOPE_BYTES)
        self.front_monitor = self.front.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.front.bind(self.bind_to)
        self.address = self.front.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.back = self.context.socket(zmq.ROUTER)
        self.back.setsockopt(zmq.LINGER, 0)
        self.back.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.back.setsockopt(zmq.SNDHWM, HWM)
        self.back.setsockopt(zmq.RCVHWM, HWM)
        self.back.setsockopt(zmq.RECONNECT_IVL, 50)
        self.back.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
        self.monitor = self.back.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
        )
        self.running.set()
        self.thread = threading.Thread(target=self._loop, name=f"aux-proxy-{self.service}")
        self.thread.daemon = True
        self.thread.start()
        return self.address

    def set_workers(self, workers: list[str]) -> None:
        """Replace the worker set (new ones are connected, removed ones lose their work)."""
        with self.lock:
            self.wanted = list(workers)

    def live_workers(self) -> int:
        return sum(worker.live for worker in list(self.workers.values()))

    def stats(self) -> dict:
        workers = list(self.workers.values())
        return {
            **self.counts,
            "service": self.service,
            "refused": dict(self.refused),
            "inflight": len(self.inflight),
            "waiting": len(self.waiting),
            "live_workers": sum(w.live for w in workers),
            "dead_workers": sorted(w.address for w in workers if not w.live),
        }

    def stop(self) -> None:
        self.running.clear()
        if self.thread is not None:
            self.thread.join(5)
            self.thread = None

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        # Only the two message sockets are polled: zmq_poll costs two mailbox checks (a
        # poll(2) and a getpid(2) each) per socket per call, so the rare monitor events are
        # read every EVENT_S instead (a dead worker is noticed at most that much later).
        poller = zmq.Poller()
        for sock in (self.front, self.back):
            poller.register(sock, zmq.POLLIN)
        timeout = int(min(EVENT_S, self.heartbeat_s / 2) * 1000)
        next_beat = next_events = 0.0
        try:
            while self.running.is_set():
                self._apply_workers()
                for sock, _ in poller.poll(timeout):
                    handle = self._from_rank if sock is self.front else self._from_worker
                    for _ in range(256):  # ZMQ_EVENTS: a failed recv costs an exception
                        handle(recv_frames(sock))
                        if not _events(sock, _EVENTS) & _POLLIN:
                            break
                now = time.monotonic()
                if now >= next_events:
                    self._events()
                    next_events = now + EVENT_S
                if now >= next_beat:
                    self._heartbeat()
                    next_beat = time.monotonic() + self.heartbeat_s
        finally:
            self.back.disable_monitor()
            self.front.disable_monitor()
            for sock in (self.monitor, self.front_monitor, self.front, self.back):
                sock.close(0)

    def _events(self) -> None:
        """Worker connections up or down; ranks gone (or cut off: a frame over the limit)."""
        while self.monitor.poll(0):
            self._on_event(recv_monitor_message(self.monitor, zmq.NOBLOCK))
        while self.front_monitor.poll(0):
            recv_monitor_message(self.front_monitor, zmq.NOBLOCK)
            self.counts["rank_disconnects"] += 1

    def _heartbeat(self) -> None:
        now = time.monotonic()
        for worker in list(self.workers.values()):
            idle = not worker.inflight  # a worker busy with our requests answers later
            if worker.live and idle and now - worker.seen > self.worker_timeout_s:
                self._lose(worker, f"no answer for {self.worker_timeout_s:g} s")
            self._ping(worker)
        if self.waiting and any(e.deadline <= time.time() for e in self.waiting):
            waiting, self.waiting = self.waiting, deque()
            for entry in waiting:
                if entry.deadline > time.time():
                    self.waiting.append(entry)
                elif self.inflight.pop((entry.client, entry.id), None) is not None:
                    self._answer(entry.client, entry.id, "timeout", "no live worker in time")
        expired = [k for k, e in self.inflight.items() if e.deadline + 1.0 < time.time()]
        for key in expired:  # the caller has given up on these
            del self.inflight[key]
        self.counts["expired"] += len(expired)
