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

    proxy = ProxyServer("encoder", ["ipc:///tmp/enc-0.sock"]); address = proxy.start()
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from typing import Any

import zmq
from zmq.backend import Socket as _RawSocket
from zmq.utils.monitor import recv_monitor_message

from driver.aux import shm
from driver.aux.envelope import (
    MAX_ENVELOPE_BYTES,
    Message,
    WireError,
    pack,
    parse,
    peek_id,
    reply_id,
)
from driver.aux.multipart import NOBLOCK, recv_frames, send_frames
from driver.aux.routing import RoundRobin, pick_worker

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
SKEW = 4  # round robin skips a worker holding this many more requests than the least busy


class ProxyServer:
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

    def _ping(self, worker: Worker) -> None:
        try:
            frames = [worker.id, b"", *pack(Message("ping"))]
            self.back.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # not connected (yet): the next beat or handshake event pings again

    # -- messages ----------------------------------------------------------------------------

    def _from_rank(self, frames: list[Any]) -> None:
        client = frames[0].bytes
        self.clients[client] = time.monotonic()
        try:
            msg = parse(frames[1:], self.max_bytes)
        except WireError as err:
            self.refused[err.reason] += 1
            self._answer(client, peek_id(frames[1:]), "protocol", str(err))
            return
        if msg.kind == "req":
            if msg.deadline <= time.time():
                self._answer(client, msg.id, "timeout", "deadline passed before the proxy")
                return
            entry = Entry(client, frames[1:], msg.id, msg.rank, msg.deadline)
            self.inflight[(client, msg.id)] = entry
            self._dispatch(entry)
        elif msg.kind == "cancel":
            entry = self.inflight.pop((client, msg.id), None)
            if entry is not None and entry.worker is not None:
                entry.worker.inflight.discard((client, msg.id))
                self._send_worker(entry.worker, frames)
            self.counts["cancelled"] += 1
        elif msg.kind == "ping":
            self.front.send_multipart([client, *self._pong(msg.id)])
        else:
            self.refused["kind"] += 1
            self._answer(client, msg.id, "protocol", f"unexpected {msg.kind} from a rank")

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
                self.refused["from_worker"] += 1
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
            self.refused["from_worker"] += 1
            return
        entry = self.inflight.pop((client, rid), None)
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
                del self.inflight[key]
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

    def _answer(self, client: bytes, request_id: int, code: str, text: str) -> None:
        self.counts[f"answered_{code}"] += 1
        msg = Message("err", request_id, code=code, error=text)
        self.front.send_multipart([client, *pack(msg)])


class Worker:
    """The proxy's view of one worker."""

    def __init__(self, address: str):
        self.address, self.live, self.seen = address, False, time.monotonic()
        self.id = address.encode()  # its routing id at the proxy's worker socket
        self.node: str | None = None  # shm.node_key() of its host, from its pongs
        self.inflight: set[tuple[bytes, int]] = set()


class Entry:
    """A request the proxy has forwarded and not yet seen answered."""

    __slots__ = ("client", "frames", "id", "rank", "deadline", "worker", "tries")

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
