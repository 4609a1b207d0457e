"""Queues between the pipeline's processes that carry typed frames, never pickle.

A `multiprocessing.Queue` pickles what it carries, and any process of the same user can
write into its pipe (through `/proc/<pid>/fd`): a pipeline process reading it would
unpickle whatever was written there. A `FrameQueue` carries records of two parts, both
plain data checked as they are read: a `head` of plain JSON (the pipeline's own fields:
numbers, strings, lists; a tuple comes back as a list) and `values`, a list of user data
in the transport form of `driver.data.codec` (`driver.messaging.wire`: JSON and raw array
frames; tuples, numpy arrays and torch tensors come back as they went). JSON's nesting is
bounded before it is parsed. Something else cannot be put (TypeError, naming where it is).
Most records (tasks, placed samples, slots) have no values and cost one `json.dumps` and
one `json.loads`.

It is a pipe (one message per put, `Connection.send_bytes`), a lock per end so several
processes may put and get, and a semaphore of `maxsize` slots (0: unbounded) that a put
takes and a get gives back, so a put waits (up to its timeout) while the queue is full.
A message is read only up to `max_bytes`; one that is longer, or does not decode, is
refused with `QueueCorrupt` (the pipe is no longer in step after it: the pipeline stops).

    q = FrameQueue(mp.get_context("fork"), maxsize=64)
    q.put(["batch", 0, 1], [spec], timeout=0.5)      # queue.Full after the timeout
    head, values = q.get(timeout=0.5)                # queue.Empty after the timeout
"""

from __future__ import annotations

import json
import queue
import select
import struct
import time
from typing import Any

from driver.data import codec
from driver.data.errors import PipelineError
from driver.messaging.limits import WireError
from driver.messaging.limits import loads as bounded_loads

PIPE_BUF = select.PIPE_BUF
"""The longest message written at once, never in part (`try_put`)."""
MAX_BYTES = 1 << 31
"""The longest message a reader takes (a sample or batch record that was not staged)."""
_COUNT = struct.Struct("<I")
_ONE = struct.Struct("<IQ")  # a record of one frame: the count (1) and its length
_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class QueueCorrupt(PipelineError):
    """A message on a pipeline queue that is too long or does not decode."""


class FrameQueue:
    """A bounded multi-producer, multi-consumer queue of typed frames between processes."""

    def __init__(self, ctx: Any, maxsize: int = 0, max_bytes: int = MAX_BYTES):
        self.reader, self.writer = ctx.Pipe(duplex=False)
        self.rlock, self.wlock = ctx.Lock(), ctx.Lock()
        self.slots = ctx.BoundedSemaphore(maxsize) if maxsize > 0 else None
        self.max_bytes = max_bytes

    def put(self, head: Any, values: list | None = None, timeout: float | None = None) -> None:
        """Send a record (TypeError if it cannot travel); queue.Full if no slot frees in
        time."""
        data = pack(head, values)
        if self.slots is not None and not self.slots.acquire(True, timeout):
            raise queue.Full
        with self.wlock:
            self.writer.send_bytes(data)

    def try_put(self, head: Any) -> bool:
        """Send a record of a head alone now if that cannot block: a free slot and room in
        the pipe (a write of up to PIPE_BUF bytes is whole or waits); False otherwise. For
        a queue with one writer (another could fill the pipe in between)."""
        data = pack(head)
        if len(data) + 4 > PIPE_BUF:
            raise ValueError(f"a record of {len(data)} bytes is longer than PIPE_BUF")
        if self.slots is not None and not self.slots.acquire(False):
            return False
        poller = select.poll()  # not select(): a descriptor past 1023 is refused there
        poller.register(self.writer.fileno(), select.POLLOUT)
        if not poller.poll(0):
            if self.slots is not None:
                self.slots.release()
            return False
        with self.wlock:
            self.writer.send_bytes(data)
        return True

    def get(self, timeout: float | None = None) -> tuple[Any, list]:
        """The next record, (head, values); queue.Empty if none comes in time, QueueCorrupt
        if it is bad."""
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


def pack(head: Any, values: list | None = None) -> bytes:
    """One message: the frame count, each frame's length, then the frames (the head's JSON,
    then the values' transport form, if any)."""
    text = _JSON(head).encode()
    if not values:  # most records: the head alone
        return _ONE.pack(1, len(text)) + text
    frames = [text, *codec.to_frames(list(values))]
    views = [memoryview(frame).cast("B") for frame in frames]
    sizes = struct.pack(f"<{len(views)}Q", *(v.nbytes for v in views))
    return b"".join([_COUNT.pack(len(views)), sizes, *views])


def unpack(data: bytes) -> tuple[Any, list]:
    """The (head, values) of a message from `pack`; QueueCorrupt if it is not one."""
    try:
        (count,) = _COUNT.unpack_from(data)
        if count == 1 and _ONE.unpack_from(data)[1] == len(data) - _ONE.size:
            return bounded_loads(data[_ONE.size :].decode()), []
        at = _COUNT.size + 8 * count
        if count < 1 or at > len(data):
            raise ValueError(f"{count} frames in {len(data)} bytes")
        sizes = struct.unpack_from(f"<{count}Q", data, _COUNT.size)
        if count < 1 or at + sum(sizes) != len(data):
            raise ValueError(f"{len(data)} bytes do not hold frames of {list(sizes)[:8]} bytes")
        buf = memoryview(bytearray(data) if count > 2 else data)  # arrays: writable
        frames = []
        for size in sizes:
            frames.append(buf[at : at + size])
            at += size
        head = bounded_loads(str(frames[0], "utf-8"))
        values = codec.from_frames(frames[1:]) if count > 1 else []
        if not isinstance(values, list):
            raise ValueError("record values are not a list")
        return head, values
    except (struct.error, ValueError, UnicodeDecodeError, WireError) as err:
        raise QueueCorrupt(f"pipeline queue: a message that is not one ({err})") from None
