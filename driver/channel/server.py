"""The driver's end of the run's channel (see driver/channel/__init__.py).

`DriverChannel.start(state, host)` binds a ROUTER on `host` (a free port) and serves the
workers' requests from a thread of the driver's process; the driver's own threads call the
same state through the channel's methods. Both go through one lock, so the state itself is
plain Python (driver.channel.state.RunChannel). The thread owns the socket (in a ZeroMQ
context of its own): it creates, uses and closes it, and `close()` stops it.

A peer must know the run's token before it can send anything: the socket is a ZMTP PLAIN
server and the serving thread answers ZeroMQ's handshake checks itself (driver.messaging.zap),
so a stranger is disconnected after its handshake (counted as `refused["token"]`) and
never gets a message buffered in the driver. A message is handled only if its frames
together are within `max_bytes` (`MAX_BYTES`; let go frame by frame as they are read past it), it
parses (driver.messaging.wire: JSON nesting bounded before parsing) and carries the
token; anything else is dropped and counted (`refused`, per reason; `refused_peers`, per
peer), with one log line per kind, since answering a stranger tells it something. A known
peer asking for a method outside `WORKER_METHODS`, or one whose handler raises, gets an
`err` reply. Should the loop fail anyway, it is logged and run again on the same socket
(`loop_restarts`).
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any

import zmq

from driver.channel.client import MAX_BYTES, USER, ChannelAddress
from driver.messaging import wire
from driver.messaging.limits import Ledger
from driver.messaging.multipart import Oversized, recv_bounded
from driver.messaging.serving import supervise
from driver.messaging.zap import Gate, plain_password

log = logging.getLogger("driver.channel")
WORKER_METHODS = frozenset(
    {"hello", "start", "push_many", "fail", "finish", "notice", "terminating", "sync", "pods_of",
     "persist"}
)  # fmt: skip
"""What a worker may ask (everything else in the state is the driver's)."""
NO_REPLY = frozenset({"push_many"})
POLL_MS = 200  # how often the serving thread looks at its stop flag when nothing arrives


def endpoint(host: str) -> str:
    """`tcp://host` for ZeroMQ's bind (an IPv6 address in brackets)."""
    return f"tcp://[{host}]" if ":" in host else f"tcp://{host}"


class DriverChannel:
    """The served state, its lock, and the thread serving the workers."""

    def __init__(self, state: Any, host: str = "127.0.0.1", max_bytes: int = MAX_BYTES):
        self.state, self.lock = state, threading.Lock()
        self.max_bytes = max_bytes  # a whole message's; with its envelope and routing id:
        self.budget = max_bytes + wire.MAX_ENVELOPE_BYTES + 256
        self.ledger = Ledger()
        self.refused = self.ledger.reasons  # per reason; self.ledger.peers per peer
        self.loop_restarts = 0
        self.persist: Callable[[], bool] = lambda: True
        """`persist` asked by a worker: write every row received so far (set by the driver to
        driver.output.progress.Progress.persist; a checkpoint commits only after its steps'
        rows are written, driver.metrics.rank.RankReporter.durable). Called outside the
        state's lock."""
        self.token = secrets.token_hex(16)
        self._stop = threading.Event()
        self._bound = threading.Event()
        self._error: BaseException | None = None
        self.address: ChannelAddress | None = None
        self._thread = threading.Thread(target=self._serve, args=(host,), name="run-channel",
                                        daemon=True)  # fmt: skip

    @classmethod
    def start(
        cls, state: Any, host: str = "127.0.0.1", max_bytes: int = MAX_BYTES
    ) -> DriverChannel:
        channel = cls(state, host, max_bytes)
        channel._thread.start()
        channel._bound.wait()
        if channel._error is not None:
            raise channel._error
        return channel

    def __getattr__(self, method: str):
        """The state's own methods, for the driver's threads, under the channel's lock."""
        if method.startswith("_"):
            raise AttributeError(method)
        target = getattr(self.state, method)

        def locked(*args, **kwargs):
            with self.lock:
                return target(*args, **kwargs)

        return locked

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def stats(self) -> dict:
        """Refusals per reason and per peer, handshakes refused, loop restarts."""
        return {**self.ledger.stats(), "loop_restarts": self.loop_restarts}

    def _serve(self, host: str) -> None:
        ctx = zmq.Context()  # its own: a context has one ZAP handler, this channel's gate
        try:
            gate = Gate(ctx, plain_password(self.token, USER))
            sock = ctx.socket(zmq.ROUTER)
            sock.linger, sock.maxmsgsize, sock.ipv6 = 0, self.max_bytes, ":" in host
            sock.plain_server = True
            port = sock.bind_to_random_port(endpoint(host))
            self.address = ChannelAddress(f"{endpoint(host)}:{port}", self.token)
        except Exception as err:  # noqa: BLE001 (handed to `start`)
            self._error = err
            ctx.destroy(0)
            return
        finally:
            self._bound.set()
        try:
            supervise(lambda: self._loop(sock, gate), self._running, self._restarted, "run channel")
        finally:
            sock.close(0)
            gate.close()
            ctx.term()

    def _running(self) -> bool:
        return not self._stop.is_set()

    def _restarted(self, err: BaseException) -> None:
        self.loop_restarts += 1

    def _loop(self, sock: zmq.Socket, gate: Gate) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(gate.sock, zmq.POLLIN)
        while not self._stop.is_set():
            for ready, _ in poller.poll(POLL_MS):
                if ready is gate.sock:
                    self._gate(gate)
                else:
                    self._serve_one(sock)

    def _gate(self, gate: Gate) -> None:
        """A handshake: the peer's PLAIN password must be the run's token."""
        if not gate.answer():
            self._refuse("token")

    def _serve_one(self, sock: zmq.Socket) -> None:
        """One message; whatever goes wrong with it is logged, and the thread serves on."""
        try:
            self._handle(sock, recv_bounded(sock, self.budget, wire.MAX_FRAMES + 2))
        except Oversized as err:
            self._refuse("oversized", err.head[0].bytes)
        except Exception:  # noqa: BLE001 (a bug here must not silence the channel)
            self.refused["internal"] += 1
            log.exception("run channel: a message could not be served")

    def _handle(self, sock: zmq.Socket, frames: list) -> None:
        peer, msg = frames[0], self._admit(frames[1:], frames[0].bytes)
        if msg is None:
            return
        if msg.method not in WORKER_METHODS:
            self._answer(sock, peer, msg, error=("method", f"no method {msg.method!r}"))
            return
        try:
            args = wire.decode(msg.body)
            result = self._call(msg.method, args)
        except Exception as err:  # noqa: BLE001 (answered to the caller)
            self._answer(sock, peer, msg, error=("failed", f"{type(err).__name__}: {err}"))
            return
        if msg.method not in NO_REPLY:
            self._answer(sock, peer, msg, result=result)

    def _call(self, method: str, args: list) -> Any:
        """A worker's method: `persist` outside the state's lock (the writer drains the
        state itself), `sync` answered once reached, the others the state's, under the lock."""
        if method == "persist":
            return bool(self.persist())
        with self.lock:
            return True if method == "sync" else getattr(self.state, method)(*args)

    def _admit(self, frames: list, peer: bytes) -> wire.Message | None:
        """The message if it parses and carries the run's token, else None (counted)."""
        try:
            msg = wire.parse(frames, self.max_bytes)
        except wire.WireError as err:
            return self._refuse(err.reason, peer)
        token = (msg.info or {}).get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            return self._refuse("token", peer)
        return msg

    def _refuse(self, reason: str, peer: bytes | None = None) -> None:
        self.ledger.refuse(peer, reason)
        if self.refused[reason] == 1:
            log.warning("run channel: dropped a message (%s); later ones are only counted", reason)
        return None

    def _answer(self, sock, peer, msg: wire.Message, result: Any = None, error=None) -> None:
        if error is not None:
            reply = wire.Message("err", id=msg.id, code=error[0], error=error[1][:2000])
        else:
            reply = wire.Message("rep", id=msg.id, body=wire.encode(result))
        try:
            sock.send_multipart([peer, *wire.pack(reply)], copy=False)
        except zmq.ZMQError as err:  # the peer went away: nothing to answer
            log.debug("run channel: reply to rank %d lost: %s", msg.rank, err)


def start_channel():
    """The run's channel, served by this (the driver's) process: on the loopback address
    when this process started the Ray it runs on (a local run: every worker is on this
    machine), else on this node's IP (the workers on other nodes connect)."""
    import ray

    from driver.embedded.lean import started_here

    host = "127.0.0.1" if started_here() else ray.util.get_node_ip_address()
    from driver.channel.state import RunChannel, dead_pods

    state = RunChannel()
    state.dead_pods = lambda: dead_pods(ray.nodes())
    return DriverChannel.start(state, host)
