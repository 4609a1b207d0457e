"""The hostile messages: raw frames that lie in every way a peer can, and slow senders.

Every builder returns a list of frames (`bytes`) as a peer sends them (no routing ids). The
envelope is written by hand (tests/aux/transport.envelope) so that it can carry what
`wire.pack` never would: a NaN deadline, text that is not UTF-8, lengths that do not add
up, info nested thousands of levels deep.
"""

from __future__ import annotations

import json
import random
import socket
import time

from driver.messaging import wire
from tests.aux.transport import envelope

DEEP = 5000  # levels: ~10 KB of brackets, the size that ended a serving thread before
HEAVY = 8  # cases of a kind that moves about a whole message limit, per suite


def deep_json(levels: int = DEEP) -> bytes:
    return b"[" * levels + b"]" * levels


def body_json(payload: bytes, arrays: bytes = b"[]") -> bytes:
    """A body frame of raw JSON: `{"p": payload, "a": arrays}`."""
    return b'{"p":' + payload + b',"a":' + arrays + b"}"


def request(method: str, body: list[bytes], rid: int = 1, info: dict | None = None,
            deadline: float | None = None) -> list[bytes]:  # fmt: skip
    """A well-formed request carrying raw body frames."""
    msg = wire.Message("req", rid, 0, method, deadline or time.time() + 30, info=info, body=body)
    return [bytes(memoryview(f)) for f in wire.pack(msg)]


def with_info(info: bytes, kind: int = 1, method: bytes = b"echo") -> list[bytes]:
    """An envelope whose info is the raw JSON `info`, and a small body."""
    env = envelope(kind, 7, 0, method, time.time() + 30, sizes=(2,),
                   lengths=(len(method), 0, 0, len(info)), text=info)  # fmt: skip
    return [env, b"{}"]


def garbage(rng: random.Random) -> list[bytes]:
    return [rng.randbytes(rng.randint(0, 96)) for _ in range(rng.randint(1, 5))]


def truncated(rng: random.Random) -> list[bytes]:
    sizes = (rng.randint(3, 64), rng.randint(3, 64))
    return [envelope(sizes=sizes), b"{}"]  # declares two frames, sends one short one


def split(limit: int, parts: int = 3) -> list[bytes]:
    """Frames each under the limit, over it together (a per-frame limit lets them in)."""
    size = limit * 9 // (10 * (parts - 1))
    return [envelope(sizes=(size,) * parts), *(bytes(size) for _ in range(parts))]


def many_frames(count: int = wire.MAX_FRAMES + 64) -> list[bytes]:
    return [envelope(sizes=(1,) * 4)] + [b"x"] * count


def huge_frame(limit: int) -> list[bytes]:
    """One frame over the limit (and its envelope's room): ZeroMQ drops the connection
    before buffering it."""
    size = limit + (64 << 10)
    return [envelope(sizes=(size,)), bytes(size)]


def nan_deadline() -> list[bytes]:
    return [envelope(deadline=float("nan"), sizes=(2,)), b"{}"]


def non_finite_body() -> list[bytes]:
    """Plain JSON numbers that are not finite (Python's json reads NaN and Infinity)."""
    return [body_json(b'{"a":NaN,"b":Infinity,"c":-Infinity,"d":1e999}')]


def big_int_info() -> list[bytes]:
    return with_info(b'{"x":' + b"7" * 6000 + b"}")


def bad_utf8() -> list[bytes]:
    return [envelope(method=b"\xff\xfe\xfd", sizes=(2,)), b"{}"]


def wrong_kind(rng: random.Random) -> list[bytes]:
    return [envelope(kind=rng.choice([2, 3, 6]), sizes=(2,)), b"{}"]


def shm_reference() -> list[bytes]:
    """An array said to lie in another process's shared memory (pid 1's fd 0)."""
    header = {"t": "<f4", "s": [1 << 20], "o": "C", "k": "numpy", "m": ["t", 1, 0, 1, 0]}
    return [body_json(b'{"$nd":0}', json.dumps([header]).encode()), b""]


def torch_attribute() -> list[bytes]:
    """A bf16-style header naming a torch attribute that is not a dtype."""
    header = {"t": "<u2", "s": [2], "o": "C", "k": "torch", "td": "onnx"}
    return [body_json(b'{"$nd":0}', json.dumps([header]).encode()), bytes(4)]


class SlowSenders:
    """Raw TCP connections that send a ZMTP greeting a byte at a time and never finish it
    (what a slow or stalled sender looks like to ZeroMQ)."""

    GREETING = b"\xff" + bytes(8) + b"\x7f\x03\x00NULL" + bytes(48)

    def __init__(self, endpoint: str, most: int = 16):
        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        self.where, self.most = (host.strip("[]"), int(port)), most
        self.sent: dict[socket.socket, int] = {}

    def step(self) -> None:
        """Open one more (up to `most`), and send each open one its next byte."""
        if len(self.sent) < self.most:
            try:
                sock = socket.create_connection(self.where, timeout=5)
            except OSError:  # nobody listens any more: the suite's checks will say so
                return
            sock.setblocking(False)
            self.sent[sock] = 0
        for sock, at in list(self.sent.items()):
            if at >= len(self.GREETING) - 1:
                continue  # one byte short of a greeting, for good
            try:
                sock.send(self.GREETING[at : at + 1])
                self.sent[sock] = at + 1
            except OSError:  # dropped by the server: fine
                del self.sent[sock]
                sock.close()

    def close(self) -> None:
        for sock in self.sent:
            sock.close()
        self.sent.clear()
