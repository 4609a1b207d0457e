"""The synchronizer's link: ZeroMQ over TCP, CurveZMQ-encrypted, learners admitted by key.

The synchronizer binds a ROUTER with its Curve key pair and a ZAP handler that admits only
the public keys in the keys folder's `allowed/` (a refused key is logged with its Z85 form
the first time, and counted: the newest `MAX_REFUSED_KEYS` keys are kept); each learner
connects a DEALER with its own key pair and the synchronizer's public key. The ZAP handler
gives each connection its learner's name as ZeroMQ's User-Id, so `Server.learner(peer)`
says whose key a message came with (a learner cannot speak as another).
Messages are `driver.messaging.wire` messages: a packed binary envelope, a JSON body and one raw
frame per tensor (bf16 travels as its raw 16 bits), never pickle. A message whose frames
together are over `max_bytes` is let go frame by frame as it is read, and refused.

    server = Server("tcp://*:5555", keys_dir)       # .recv(timeout) -> (peer, Message) | None
    client = Client("tcp://sync:5555", keys.client_keys(keys_dir, "a"))  # .request(...) -> id
"""

from __future__ import annotations

import itertools
import logging
import os
from collections import OrderedDict
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from driver.diloco import keys
from driver.messaging import wire
from driver.messaging.multipart import Oversized, recv_bounded

log = logging.getLogger("driver.diloco.link")
MAX_BYTES = 8 << 30  # the largest message accepted (tensors of a model of about 2G params)
HEARTBEAT_MS = 1000  # ZMTP heartbeats: a dead peer is noticed and reconnected in seconds
HEARTBEAT_TIMEOUT_MS = 5000
MAX_REFUSED_KEYS = 256  # refused keys remembered with their counts (the newest)
MAX_PEERS = 4096  # connections whose learner name is remembered (the newest)


class _Allowlist:
    """ZAP credentials provider: admits the allowed keys, logs a refused key the first time
    and counts every refusal (`refused`: key -> count, the newest `MAX_REFUSED_KEYS`)."""

    def __init__(self, allowed: dict[bytes, str]):
        self.allowed = allowed
        self.refused: OrderedDict[str, int] = OrderedDict()
        self.refusals = 0

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self.allowed:
            return True
        text = key.decode(errors="replace")
        self.refusals += 1
        if text not in self.refused:
            log.warning("refused a peer with an unknown Curve key %s", text)
        self.refused[text] = self.refused.pop(text, 0) + 1
        if len(self.refused) > MAX_REFUSED_KEYS:
            self.refused.popitem(last=False)
        return False

    def user_id(self, public_key: bytes) -> str:
        """The User-Id of an admitted connection: its learner's name."""
        return self.allowed[z85.encode(public_key)]

    def stats(self) -> dict:
        return {"refusals": self.refusals, "keys": len(self.refused)}


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
        self.auth.curve_user_id = self.allowlist.user_id  # each connection: its learner
        self.sock = self.ctx.socket(zmq.ROUTER)
        _heartbeats(self.sock)
        self.sock.maxmsgsize = max_bytes + wire.MAX_ENVELOPE_BYTES  # one frame
        self.sock.curve_server = True
        self.sock.curve_publickey, self.sock.curve_secretkey = public, secret
        self.sock.bind(address)
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.max_bytes = max_bytes
        self.budget = max_bytes + wire.MAX_ENVELOPE_BYTES + 256  # a whole message
        self.sent_bytes = 0
        self.names: OrderedDict[bytes, str] = OrderedDict()  # peer -> its key's learner
        self.malformed = 0

    def recv(self, timeout_s: float) -> tuple[bytes, wire.Message] | None:
        """The next message and its sender, or None after `timeout_s`; a message that does
        not parse (or is over `max_bytes` in all) is answered with a protocol error and
        skipped."""
        if not self.sock.poll(int(timeout_s * 1000)):
            return None
        try:
            peer, *frames = recv_bounded(self.sock, self.budget, wire.MAX_FRAMES + 2)
        except Oversized as err:
            return self._malformed(err.head[0].bytes, err.head[1:], f"oversized: {err}")
        self._name(peer.bytes, frames[0] if frames else None)
        try:
            return peer.bytes, wire.parse(frames, self.max_bytes)
        except wire.WireError as err:
            return self._malformed(peer.bytes, frames, str(err))

    def _malformed(self, peer: bytes, frames: list, text: str) -> None:
        self.malformed += 1
        if self.malformed <= 100 or self.malformed % 1000 == 0:
            log.warning("refused a malformed message from %r: %s", self.learner(peer), text)
        self.error(peer, wire.peek_id(frames), "protocol", text[:2000])
        return None

    def _name(self, peer: bytes, frame: Any) -> None:
        """Remember whose key `peer`'s connection was admitted with (ZAP's User-Id)."""
        try:
            name = frame.get("User-Id") if frame is not None else None
        except (zmq.ZMQError, AttributeError, UnicodeError):
            name = None
        if name and self.names.get(peer) != name:
            self.names[peer] = name
            if len(self.names) > MAX_PEERS:
                self.names.popitem(last=False)

    def learner(self, peer: bytes) -> str | None:
        """The learner whose Curve key `peer`'s connection was admitted with."""
        return self.names.get(peer)

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
