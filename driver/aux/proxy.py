"""A service's proxy on one node: ranks connect over TCP, workers over local IPC.

One thread polls a ROUTER bound on TCP (training ranks' `AuxClient`s), a ROUTER connected
to every worker (`WorkerServer`, addressed by its endpoint string) and that socket's
monitor. Requests are checked (`envelope.parse`: envelope, frame count and lengths, declared
size, the info's JSON nesting; a frame over `max_message_bytes` is refused by ZeroMQ before
it is read, and the peer disconnected; a message whose frames together are over it is let
go frame by frame as it is read, `multipart.recv_bounded`) and forwarded round robin to
live workers, skipping a worker that holds `SKEW` more requests than the least busy one (a
slower worker would otherwise build a longer queue, and the ranks whose requests keep
landing on it would be served less); replies go back to the rank.

Nothing a rank sends ends the loop: every refusal is answered (`protocol`) and counted per
reason and per rank (`stats()["refused"]`, `["refused_peers"]`); an error while handling a
message is counted as `internal`; and should the loop fail anyway it is logged and run
again on the same sockets (`messaging.serving.supervise`, `stats()["restarts"]`). A rank
holds at most `max_client_bytes` of requests at the proxy (they stay in memory until a
worker answers, to be re-sent if it dies) and `MAX_CLIENT_REQUESTS` requests; beyond that
it is answered `queue_full`. A request id the rank has in flight already is a replay,
dropped and counted.

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

import logging
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
from driver.messaging.envelope import MAX_ENVELOPE_BYTES, MAX_FRAMES, peek_id
from driver.messaging.limits import Ledger
from driver.messaging.multipart import Oversized, recv_bounded
from driver.messaging.serving import supervise

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
    "restarts",
)
log = logging.getLogger("driver.aux.proxy")
HWM = 100_000  # messages queued per peer before a send would block
EVENT_S = 0.01  # how often the monitor sockets are read
MAX_CLIENTS = 4096  # ranks remembered (to tell of worker changes) before the old are forgotten
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
        max_client_bytes: int | None = None,
        context: zmq.Context | None = None,
    ):
        """`max_client_bytes`: requests one rank may have held at the proxy (default
        `max_message_bytes`; one request is always taken)."""
        if on_worker_loss not in LOSS_POLICIES:
            raise ValueError(f"on_worker_loss {on_worker_loss!r}: expected {LOSS_POLICIES}")
        self.service, self.max_bytes = service, max_message_bytes
        self.max_client_bytes = max_message_bytes if max_client_bytes is None else max_client_bytes
        # a rank's whole message: its routing id, the envelope and the body's frames
        self.budget = max_message_bytes + MAX_ENVELOPE_BYTES + 256
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
        self.ledger = Ledger()  # refusals per reason and per rank
        self.refused = self.ledger.reasons
        self.held: dict[bytes, list[int]] = {}  # per rank: [requests, bytes] held here
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
        self.thread = threading.Thread(target=self._run, name=f"aux-proxy-{self.service}")
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
            **self.ledger.stats(),
            "service": self.service,
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

    def _run(self) -> None:
        """The serving thread: the loop, run again if it fails; the sockets closed at the end."""
        try:
            supervise(self._loop, self.running.is_set, self._restarted, f"aux proxy {self.service}")
        finally:
            self.back.disable_monitor()
            self.front.disable_monitor()
            for sock in (self.monitor, self.front_monitor, self.front, self.back):
                sock.close(0)

    def _restarted(self, err: BaseException) -> None:
        self.counts["restarts"] += 1

    def _loop(self) -> None:
        # Only the two message sockets are polled: zmq_poll costs two mailbox checks (a
        # poll(2) and a getpid(2) each) per socket per call, so the rare monitor events are
        # read every EVENT_S instead (a dead worker is noticed at most that much later).
        poller = zmq.Poller()
        for sock in (self.front, self.back):
            poller.register(sock, zmq.POLLIN)
        timeout = int(min(EVENT_S, self.heartbeat_s / 2) * 1000)
        next_beat = next_events = 0.0
        budget, frames = self.budget, MAX_FRAMES + 3
        while self.running.is_set():
            self._apply_workers()
            for sock, _ in poller.poll(timeout):
                front = sock is self.front
                handle = self._from_rank if front else self._from_worker
                for _ in range(256):  # ZMQ_EVENTS: a failed recv costs an exception
                    try:
                        handle(recv_bounded(sock, budget, frames))
                    except Oversized as err:
                        self._oversized(err, front)
                    except zmq.Again:  # nothing after all
                        break
                    except Exception as err:  # noqa: BLE001 (a message must not end the loop)
                        self._internal(err)
                    if not _events(sock, _EVENTS) & _POLLIN:
                        break
            now = time.monotonic()
            if now >= next_events:
                self._events()
                next_events = now + EVENT_S
            if now >= next_beat:
                self._heartbeat()
                next_beat = time.monotonic() + self.heartbeat_s

    def _oversized(self, err: Oversized, front: bool) -> None:
        peer = err.head[0].bytes
        if not front:
            self.ledger.refuse(peer, "from_worker")
            return
        self.ledger.refuse(peer, "oversized")
        text = f"oversized: {err}, limit {self.max_bytes}"
        self._answer(peer, peek_id(err.head[1:]), "protocol", text)

    def _internal(self, err: Exception) -> None:
        self.refused["internal"] += 1
        if self.refused["internal"] <= 3:  # the first few with their traceback
            log.error("aux proxy %s: a message could not be handled", self.service, exc_info=err)

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
                elif self._drop((entry.client, entry.id)) is not None:
                    self._answer(entry.client, entry.id, "timeout", "no live worker in time")
        expired = [k for k, e in self.inflight.items() if e.deadline + 1.0 < time.time()]
        for key in expired:  # the caller has given up on these
            self._drop(key)
        self.counts["expired"] += len(expired)
        if len(self.clients) > MAX_CLIENTS:  # ranks heard from long ago (a flood of new ids)
            old = time.monotonic() - 60.0
            self.clients = {c: seen for c, seen in self.clients.items() if seen > old}
