"""Peers checked at the ZeroMQ handshake, answered from the serving loop's own thread.

ZeroMQ asks a ZAP handler (ZMTP's authentication protocol, RFC 27) about every peer that
connects to a socket with a security mechanism, before the peer can send one message: a
stranger is disconnected after its handshake, so it can make the server hold nothing but
that handshake (one frame, within `ZMQ_MAXMSGSIZE`). `Gate` is such a handler: a REP socket
bound on the context's ZAP endpoint, which the serving loop polls beside its own socket
and answers with `check(mechanism, credentials)`: a user id to admit, None to refuse
(counted in `refused`). The context must be the server's own (one handler per context),
and the gate bound before the server socket.

    gate = Gate(ctx, lambda mech, creds: b"worker" if ok(mech, creds) else None)
    sock = ctx.socket(zmq.ROUTER); sock.plain_server = True; sock.bind(...)
    ... if gate.sock in ready: gate.answer()
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

import zmq

ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq looks for a context's ZAP handler
Check = Callable[[bytes, list[bytes]], bytes | None]


class Gate:
    """A ZAP handler: answers libzmq's requests with `check`; counts refusals."""

    def __init__(self, ctx: zmq.Context, check: Check):
        self.check, self.refused, self.admitted = check, 0, 0
        self.sock = ctx.socket(zmq.REP)
        self.sock.linger = 0
        self.sock.bind(ENDPOINT)

    def answer(self) -> bool:
        """Answer one waiting request (NOBLOCK); whether the peer was admitted."""
        frames = self.sock.recv_multipart(zmq.NOBLOCK)
        rid = frames[1] if len(frames) > 1 else b""
        user = None
        if len(frames) >= 6 and frames[0] == b"1.0":
            try:
                user = self.check(frames[5], frames[6:])
            except Exception:  # noqa: BLE001 (a check that fails refuses)
                user = None
        if user is None:
            self.refused += 1
            self.sock.send_multipart([b"1.0", rid, b"400", b"refused", b"", b""])
            return False
        self.admitted += 1
        self.sock.send_multipart([b"1.0", rid, b"200", b"OK", user, b""])
        return True

    def close(self) -> None:
        self.sock.close(0)


def plain_password(password: str, user: bytes) -> Check:
    """A `check` for ZMTP PLAIN that admits any username with `password` (compared in
    constant time) as `user`."""
    expected = password.encode()

    def check(mechanism: bytes, credentials: list[bytes]) -> bytes | None:
        if mechanism != b"PLAIN" or len(credentials) != 2:
            return None
        return user if hmac.compare_digest(credentials[1], expected) else None

    return check
