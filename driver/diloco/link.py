"""The synchronizer's link: ZeroMQ over TCP, CurveZMQ-encrypted, learners admitted by key.

The synchronizer binds a ROUTER with its Curve key pair and a ZAP handler that admits only
the public keys in the keys folder's `allowed/` (a refused key is logged with its Z85 form);
each learner connects a DEALER with its own key pair and the synchronizer's public key.
Messages are `driver.messaging.wire` messages: a packed binary envelope, a JSON body and one raw
frame per tensor (bf16 travels as its raw 16 bits), never pickle.

    server = Server("tcp://*:5555", keys_dir)       # .recv(timeout) -> (peer, Message) | None
    client = Client("tcp://sync:5555", keys.client_keys(keys_dir, "a"))  # .request(...) -> id
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from driver.diloco import keys
from driver.messaging import wire

log = logging.getLogger("driver.diloco.link")
MAX_BYTES = 8 << 30  # the largest message accepted (tensors of a model of about 2G params)
HEARTBEAT_MS = 1000  # ZMTP heartbeats: a dead peer is noticed and reconnected in seconds
HEARTBEAT_TIMEOUT_MS = 5000


class _Allowlist:
    """ZAP credentials provider: admits the allowed keys, logs every refusal."""

    def __init__(self, allowed: dict[bytes, str]):
        self.allowed = allowed
        self.refused: list[str] = []

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self.allowed:
            return True
        self.refused.append(key.decode())
        log.warning("refused a peer with an unknown Curve key %s", key.decode())
        return False


def _heartbeats(sock: zmq.Socket) -> None:
    sock.linger = 0
    sock.heartbeat_ivl = HEARTBEAT_MS
    sock.heartbeat_timeout = HEARTBEAT_TIMEOUT_MS
    sock.heartbeat_ttl = HEARTBEAT_TIMEOUT_MS


class Server:
    """The synchronizer's bound, authenticated socket."""

    def __init__(self, address: str, keys_dir: str, max_bytes: int = MAX_BYTES, environ=None):
        """`keys_dir` is a keys folder, or `env` for keys in `REVE_DILOCO_*` (keys.from_env)."""
        if keys_dir == "env":
            public, secret, allowed = keys.from_env(os.environ if environ is None else environ)
        else:
            (public, secret), allowed = keys.server_keys(keys_dir), keys.allowed_keys(keys_dir)
        self.ctx = zmq.Context()
        self.auth = ThreadAuthenticator(self.ctx, log=log)
        self.auth.start()
        self.allowlist = _Allowlist(allowed)
        self.auth.configure_curve_callback("*", credentials_provider=self.allowlist)
        self.sock = self.ctx.socket(zmq.ROUTER)
        _heartbeats(self.sock)
        self.sock.curve_server = True
        self.sock.curve_publickey, self.sock.curve_secretkey = public, secret
        self.sock.bind(address)
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.max_bytes = max_bytes
        self.sent_bytes = 0

    def recv(self, timeout_s: float) -> tuple[bytes, wire.Message] | None:
        """The next message and its sender, or None after `timeout_s`; a message that does
        not parse is answered with a protocol error and skipped."""
        if not self.sock.poll(int(timeout_s * 1000)):
            return None
        peer, *frames = self.sock.recv_multipart(copy=False)
        try:
            return peer.bytes, wire.parse(frames, self.max_bytes)
        except wire.WireError as err:
            log.warning("refused a malformed message: %s", err)
            self.error(peer.bytes, 0, "protocol", str(err))
            return None

    def reply(self, peer: bytes, request_id: int, payload: Any) -> None:
        self._send(peer, wire.Message("rep", id=request_id, body=wire.encode(payload)))

    def error(self, peer: bytes, request_id: int, code: str, text: str) -> None:
        self._send(peer, wire.Message("err", id=request_id, code=code, error=text))

    def _send(self, peer: bytes, msg: wire.Message) -> None:
        frames = wire.pack(msg)
        self.sent_bytes += sum(len(memoryview(f)) for f in frames)
        self.sock.send_multipart([peer, *frames], copy=False)

    def close(self, linger_s: float = 2.0) -> None:
        """Close, giving replies already queued `linger_s` to leave."""
        self.sock.close(int(linger_s * 1000))
        self.auth.stop()
        self.ctx.term()


class Client:
    """A learner's connection: numbered requests, replies read without blocking training."""

    def __init__(self, address: str, curve: tuple[bytes, bytes, bytes], max_bytes: int = MAX_BYTES):
        """`curve`: this learner's public and secret keys and the synchronizer's public key."""
        public, secret, server_public = curve
        # The process's shared context, never terminated here: a Client dropped unclosed
        # in a reference cycle then has only its socket closed by the garbage collector.
        # A context of its own would be terminated there, before its socket was closed
        # (the order of finalizers in a cycle is arbitrary), and wait for it forever.
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        _heartbeats(self.sock)
        self.sock.curve_publickey, self.sock.curve_secretkey = public, secret
        self.sock.curve_serverkey = server_public
        self.sock.connect(address)
        self.ids = itertools.count(1)
        self.max_bytes = max_bytes
        self.sent_bytes = 0

    def request(self, method: str, payload: Any) -> int:
        """Send a request; returns its id (the reply carries it)."""
        request_id = next(self.ids)
        frames = wire.pack(
            wire.Message("req", id=request_id, method=method, body=wire.encode(payload))
        )
        self.sent_bytes += sum(len(memoryview(f)) for f in frames)
        self.sock.send_multipart(frames, copy=False)
        return request_id

    def recv(self, timeout_s: float) -> wire.Message | None:
        """The next reply (`rep` or `err`), or None after `timeout_s` (0: do not wait)."""
        if not self.sock.poll(int(timeout_s * 1000)):
            return None
        frames = self.sock.recv_multipart(copy=False)
        try:
            return wire.parse(frames, self.max_bytes)
        except wire.WireError as err:
            log.warning("dropped a malformed reply: %s", err)
            return None

    def close(self) -> None:
        self.sock.close(0)
