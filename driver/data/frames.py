"""Queues between the pipeline's processes that carry typed frames, never pickle.

A `multiprocessing.Queue` pickles what it carries, and any process of the same user can
write into its pipe (through `/proc/<pid>/fd`): a pipeline process reading it would
unpickle whatever was written there. A `FrameQueue` carries only the transport form of
`driver.data.codec` (`driver.messaging.wire` bodies: JSON, its nesting bounded before it is
parsed, and raw array frames, checked as they are read), so what a reader gets back is
plain data: None, bools, numbers, strings, lists, tuples, dicts with string keys, numpy
arrays and torch tensors. Something else cannot be put (TypeError, naming where it is).

It is a pipe (one message per put, `Connection.send_bytes`), a lock per end so several
processes may put and get, and a semaphore of `maxsize` slots (0: unbounded) that a put
takes and a get gives back, so a put waits (up to its timeout) while the queue is full.
A message is read only up to `max_bytes`; one that is longer, or does not decode, is
refused with `QueueCorrupt` (the pipe is no longer in step after it: the pipeline stops).

    q = FrameQueue(mp.get_context("fork"), maxsize=64)
    q.put(("batch", 0, 1, [3, 4]), timeout=0.5)      # queue.Full after the timeout
    item = q.get(timeout=0.5)                        # queue.Empty after the timeout
"""

from __future__ import annotations

import queue
import struct
import time
from typing import Any

from driver.data import codec
from driver.data.errors import PipelineError
from driver.messaging.limits import WireError

MAX_BYTES = 1 << 31
"""The longest message a reader takes (a sample or batch record that was not staged)."""
_COUNT = struct.Struct("<I")


class QueueCorrupt(PipelineError):
    """A message on a pipeline queue that is too long or does not decode."""


class FrameQueue:
    """A bounded multi-producer, multi-consumer queue of typed frames between processes."""

    def __init__(self, ctx: Any, maxsize: int = 0, max_bytes: int = MAX_BYTES):
        self.reader, self.writer = ctx.Pipe(duplex=False)
        self.rlock, self.wlock = ctx.Lock(), ctx.Lock()
        self.slots = ctx.BoundedSemaphore(maxsize) if maxsize > 0 else None
        self.max_bytes = max_bytes

    def put(self, item: Any, timeout: float | None = None) -> None:
        """Send `item` (TypeError if it cannot travel); queue.Full if no slot frees in time."""
        data = pack(item)
        if self.slots is not None and not self.slots.acquire(True, timeout):
            raise queue.Full
        with self.wlock:
            self.writer.send_bytes(data)

    def get(self, timeout: float | None = None) -> Any:
        """The next item; queue.Empty if none comes in time, QueueCorrupt if it is bad."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.rlock.acquire(True, timeout):
            raise queue.Empty
        try:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.reader.poll(left):
                raise queue.Empty
            try:
                data = self.reader.recv_bytes(self.max_bytes)
            except OSError as err:
                raise QueueCorrupt(f"pipeline queue: {err}") from None
        finally:
            self.rlock.release()
        if self.slots is not None:
            try:
                self.slots.release()
            except ValueError:  # more messages than puts: written by someone else
                raise QueueCorrupt("pipeline queue: a message no put sent") from None
        return unpack(data)

    def cancel_join_thread(self) -> None:
        """Nothing to cancel (no feeder thread); here for `multiprocessing.Queue`'s callers."""

    def close(self) -> None:
        for end in (self.reader, self.writer):
            try:
                end.close()
            except OSError:
                pass


def pack(item: Any) -> bytes:
    """One message: the frame count, each frame's length, then the frames."""
    frames = codec.to_frames(item)
    views = [memoryview(frame).cast("B") for frame in frames]
    sizes = struct.pack(f"<{len(views)}Q", *(v.nbytes for v in views))
    return b"".join([_COUNT.pack(len(views)), sizes, *views])


def unpack(data: bytes) -> Any:
    """The item of a message from `pack`; QueueCorrupt if it is not one."""
    try:
        (count,) = _COUNT.unpack_from(data)
        at = _COUNT.size + 8 * count
        if count < 1 or at > len(data):
            raise ValueError(f"{count} frames in {len(data)} bytes")
        sizes = struct.unpack_from(f"<{count}Q", data, _COUNT.size)
        if count < 1 or at + sum(sizes) != len(data):
            raise ValueError(f"{len(data)} bytes do not hold frames of {list(sizes)[:8]} bytes")
        buf = memoryview(bytearray(data) if count > 1 else data)  # arrays: writable
        frames = []
        for size in sizes:
            frames.append(buf[at : at + size])
            at += size
        return codec.from_frames(frames)
    except (struct.error, ValueError, WireError) as err:
        raise QueueCorrupt(f"pipeline queue: a message that is not one ({err})") from None
