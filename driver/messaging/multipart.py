"""Moving ZeroMQ multipart messages without copies, and sizing their frames.

`send_frames` and `recv_frames` move a multipart message with the backend socket's calls
and plain int flags (pyzmq's `send_multipart`/`recv_multipart` cost about 4 us more per
message in flag enums and a RCVMORE query per frame); frames are never copied. `buffer`
and `nbytes` read a frame of any kind (zmq.Frame, bytes, bytearray, memoryview).

`recv_bounded` is `recv_frames` with a budget for the whole message (all frames together,
and their count). ZeroMQ bounds one frame (`ZMQ_MAXMSGSIZE`: a peer that announces a bigger
frame is disconnected before it is buffered), but it hands a multipart message over only
once its last frame has arrived and counts its high-water mark in whole messages, so no
socket option bounds a message's total: the receiver counts the frames as it takes them,
and from the first one over the budget releases each as it reads it, down to the last
(RCVMORE unset), keeping only the first `keep` (routing ids and envelope, to answer or
count the peer by) and raising `Oversized`. What a stranger can make ZeroMQ buffer is
bounded only by keeping strangers out at the handshake (CURVE or a ZAP check), as the
run's channel and DiLoCo's link do.
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


class Oversized(Exception):
    """A message over its receiver's budget: `head` (its first frames), its size and count
    when the receiver stopped holding it (the rest was released as it was read)."""

    def __init__(self, head: list[Any], nbytes: int, count: int):
        super().__init__(f"message of over {nbytes} bytes in {count}+ frames")
        self.head, self.nbytes, self.count = head, nbytes, count


def recv_bounded(
    sock: zmq.Socket, max_bytes: int, max_frames: int, flags: int = NOBLOCK, keep: int = 2
) -> list[zmq.Frame]:
    """`recv_frames` within a budget for the whole message: at most `max_bytes` in all and
    `max_frames` frames; raises Oversized (after reading the rest) when it is over."""
    frame = _recv(sock, flags, False)
    frames, total = [frame], len(frame)
    while frame.more:
        frame = _recv(sock, flags, False)
        total += len(frame)
        frames.append(frame)
        if total > max_bytes or len(frames) > max_frames:
            head, count = frames[:keep], len(frames)
            del frames
            while frame.more:  # the rest of this message: read and let go
                frame = _recv(sock, flags, False)
                total, count = total + len(frame), count + 1
            raise Oversized(head, total, count)
    if total > max_bytes:
        raise Oversized(frames[:keep], total, 1)
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
