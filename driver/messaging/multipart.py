"""Moving ZeroMQ multipart messages without copies, and sizing their frames.

`send_frames` and `recv_frames` move a multipart message with the backend socket's calls
and plain int flags (pyzmq's `send_multipart`/`recv_multipart` cost about 4 us more per
message in flag enums and a RCVMORE query per frame); frames are never copied. `buffer`
and `nbytes` read a frame of any kind (zmq.Frame, bytes, bytearray, memoryview).
"""

from __future__ import annotations

from typing import Any

import zmq
from zmq.backend import Socket as _RawSocket

NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
_send, _recv = _RawSocket.send, _RawSocket.recv


def send_frames(sock: zmq.Socket, frames: list[Any], flags: int = 0) -> None:
    """Send `frames` as one message, zero-copy (a refusal raises on the first frame)."""
    more = flags | _SNDMORE
    for frame in frames[:-1]:
        _send(sock, frame, more, False)
    _send(sock, frames[-1], flags, False)


def recv_frames(sock: zmq.Socket, flags: int = NOBLOCK) -> list[zmq.Frame]:
    """One whole message as zmq.Frame objects (raises zmq.Again when none is waiting)."""
    frame = _recv(sock, flags, False)
    frames = [frame]
    while frame.more:
        frame = _recv(sock, flags, False)
        frames.append(frame)
    return frames


def buffer(frame: Any) -> memoryview:
    """The bytes of a frame, without a copy."""
    buf = frame.buffer if hasattr(frame, "buffer") else frame
    return buf if isinstance(buf, memoryview) else memoryview(buf)


def nbytes(frame: Any) -> int:
    """The size of a frame in bytes."""
    if isinstance(frame, bytes | bytearray):
        return len(frame)
    if isinstance(frame, memoryview):
        return frame.nbytes
    return len(frame)
