"""The driver's end of the run's channel (see driver/channel/__init__.py).

`DriverChannel.start(state, host)` binds a ROUTER on `host` (a free port) and serves the
workers' requests from a thread of the driver's process; the driver's own threads call the
same state through the channel's methods. Both go through one lock, so the state itself is
plain Python (driver.channel.state.RunChannel). The thread owns the socket: it creates, uses and
closes it, and `close()` stops it.

A message is handled only if it parses (driver.messaging.wire, within `MAX_BYTES`) and carries
the run's token; anything else is dropped and counted (`refused`), with one log line per
kind, since answering a stranger tells it something. A known peer asking for a method
outside `WORKER_METHODS`, or one whose handler raises, gets an `err` reply.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
from collections import Counter
from typing import Any

import zmq

from driver.channel.client import MAX_BYTES, ChannelAddress
from driver.messaging import wire

log = logging.getLogger("driver.channel")
WORKER_METHODS = frozenset(
    {"hello", "start", "push_many", "fail", "finish", "notice", "sync", "pods_of"}
)
"""What a worker may ask (everything else in the state is the driver's)."""
NO_REPLY = frozenset({"push_many"})
POLL_MS = 200  # how often the serving thread looks at its stop flag when nothing arrives


def endpoint(host: str) -> str:
    """`tcp://host` for ZeroMQ's bind (an IPv6 address in brackets)."""
    return f"tcp://[{host}]" if ":" in host else f"tcp://{host}"


class DriverChannel:
    """The served state, its lock, and the thread serving the workers."""

    def __init__(self, state: Any, host: str = "127.0.0.1"):
        self.state, self.lock = state, threading.Lock()
        self.refused: Counter[str] = Counter()
        self.token = secrets.token_hex(16)
        self._stop = threading.Event()
        self._bound = threading.Event()
        self._error: BaseException | None = None
        self.address: ChannelAddress | None = None
        self._thread = threading.Thread(target=self._serve, args=(host,), name="run-channel",
                                        daemon=True)  # fmt: skip

    @classmethod
    def start(cls, state: Any, host: str = "127.0.0.1") -> DriverChannel:
        channel = cls(state, host)
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

    def _serve(self, host: str) -> None:
        try:
            sock = zmq.Context.instance().socket(zmq.ROUTER)
            sock.linger, sock.maxmsgsize, sock.ipv6 = 0, MAX_BYTES, ":" in host
            port = sock.bind_to_random_port(endpoint(host))
            self.address = ChannelAddress(f"{endpoint(host)}:{port}", self.token)
        except Exception as err:  # noqa: BLE001 (handed to `start`)
            self._error = err
            return
        finally:
            self._bound.set()
        try:
            while not self._stop.is_set():
                if sock.poll(POLL_MS):
                    self._serve_one(sock)
        finally:
            sock.close()

    def _serve_one(self, sock: zmq.Socket) -> None:
        """One message; whatever goes wrong with it is logged, and the thread serves on."""
        try:
            self._handle(sock, sock.recv_multipart(copy=False))
        except Exception:  # noqa: BLE001 (a bug here must not silence the channel)
            self.refused["internal"] += 1
            log.exception("run channel: a message could not be served")

    def _handle(self, sock: zmq.Socket, frames: list) -> None:
        peer, msg = frames[0], self._admit(frames[1:])
        if msg is None:
            return
        if msg.method not in WORKER_METHODS:
            self._answer(sock, peer, msg, error=("method", f"no method {msg.method!r}"))
            return
        try:
            args = wire.decode(msg.body)
            with self.lock:
                result = True if msg.method == "sync" else getattr(self.state, msg.method)(*args)
        except Exception as err:  # noqa: BLE001 (answered to the caller)
            self._answer(sock, peer, msg, error=("failed", f"{type(err).__name__}: {err}"))
            return
        if msg.method not in NO_REPLY:
            self._answer(sock, peer, msg, result=result)

    def _admit(self, frames: list) -> wire.Message | None:
        """The message if it parses and carries the run's token, else None (counted)."""
        try:
            msg = wire.parse(frames, MAX_BYTES)
        except wire.WireError as err:
            return self._refuse(err.reason)
        token = (msg.info or {}).get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            return self._refuse("token")
        return msg

    def _refuse(self, reason: str) -> None:
        self.refused[reason] += 1
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
