"""Large arrays between a rank and a worker on one node, through shared memory: segments.

Over TCP and IPC a 16 MiB array is copied by the kernel twice per socket hop (four hops
there and back) and lands in fresh pages each time (a page fault per 4 KiB, slow in a VM).
When the rank and its proxy's node share a kernel and a PID namespace (`node_key()` equal:
the proxy reports its own in its pongs), the client instead copies each array of at least
`MIN_BYTES` into a segment of its `Pool` (memfd, pre-faulted once, reused), and the frame
carries only a reference; the worker maps the segment through
`/proc/<pid>/fd/<fd>` (checking the inode: `[token, pid, fd, inode, offset]`) into
`Attached`, an LRU of mappings, and reads the arrays in place. A segment is sealed against
shrinking and growing (`F_SEAL_SHRINK | F_SEAL_GROW`) once sized, so a mapping of it can
never fault (SIGBUS) on pages its owner took away; the worker maps only sealed segments,
and checks their size against its limit before it maps (and so allocates) any. The
request also offers a reply segment (`"rs"` in its envelope's info): the worker copies big
reply arrays into it, and the client hands them out as views whose segment goes back to
the pool when the last view dies. Nothing outlives the owning process (memfds have no
name); a segment the worker might still touch (a handler kept a view, the request timed
out, was cancelled or re-sent) is retired, never reused. Elsewhere frames travel as before.

This module holds the segments themselves (`Segment`, `Pool`, `Lease`); the client's use
of them is shm_client.py (`Lender`), the worker's shm_worker.py (`Attached`, `Borrowed`).

    pool = Pool(1 << 30); seg = pool.take(n); ref = seg.place(frame); ...; pool.give(seg)
    view = Lease(mapping).view(offset, nbytes)   # a segment's bytes as an array source
"""

from __future__ import annotations

import fcntl
import itertools
import mmap
import os
import secrets
import threading
from typing import Any

import numpy as np

MIN_BYTES = 1 << 20  # arrays below this travel as frames: a copy costs less than the setup
SEGMENT_MIN = 1 << 20
PREFIX = "aux-shm-"  # memfd name: a worker maps nothing else
_NONCE = secrets.token_hex(4)
_SERIALS = itertools.count(1)
"""One count for the whole process: a token names one segment even with several clients
(each with its own pool) sending to one worker, which caches mappings by token."""
MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW  # a sized segment keeps its size


def node_key() -> str:
    """Who may map our segments: same boot (kernel), PID namespace and user."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}/{os.getuid()}"
    except OSError:
        return ""  # no /proc: no shared memory


def supported() -> bool:
    sealing = hasattr(os, "MFD_ALLOW_SEALING") and hasattr(fcntl, "F_ADD_SEALS")
    return hasattr(os, "memfd_create") and sealing and bool(node_key())


class Segment:
    """One memfd mapping owned by this process; `ref(offset)` names a place in it."""

    def __init__(self, size: int, serial: int):
        self.size, self.token = size, f"{_NONCE}.{os.getpid()}.{serial}"
        self.fd = os.memfd_create(f"{PREFIX}{serial}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, SEALS)
        self.map = mmap.mmap(self.fd, size, flags=MAP_FLAGS)
        self.inode = os.fstat(self.fd).st_ino
        self.used = 0  # bytes placed by the current user
        self.doomed = False  # retire instead of reuse when its last view is gone

    def ref(self, offset: int) -> list[Any]:
        return [self.token, os.getpid(), self.fd, self.inode, offset]

    def place(self, frame: Any) -> list[Any] | None:
        """Copy `frame` in after what is placed already; its reference, or None if full."""
        src = np.frombuffer(frame, np.uint8)
        at = (self.used + 63) & ~63
        if at + src.nbytes > self.size:
            return None
        np.copyto(np.frombuffer(self.map, np.uint8, src.nbytes, at), src)
        self.used = at + src.nbytes
        return self.ref(at)

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:  # views still out: the mapping goes with the last one
            pass
        os.close(self.fd)


class Pool:
    """A client's segments, reused; at most `limit` bytes of them exist at once."""

    def __init__(self, limit: int):
        self.limit, self.total = limit, 0
        self.free: list[Segment] = []
        self.closed = False
        self.lock = threading.RLock()  # views die (and give back) on any thread

    def take(self, nbytes: int) -> Segment | None:
        with self.lock:
            fits = [s for s in self.free if s.size >= nbytes]
            if fits:
                seg = min(fits, key=lambda s: s.size)
                self.free.remove(seg)
                seg.used = 0
                return seg
            size = max(SEGMENT_MIN, -(-nbytes // SEGMENT_MIN) * SEGMENT_MIN)
            while self.free and self.total + size > self.limit:  # make room: drop idle ones
                self._drop(self.free.pop(0))
            if self.total + size > self.limit:
                return None
            self.total += size
        try:
            return Segment(size, next(_SERIALS))
        except OSError:
            with self.lock:
                self.total -= size
            return None

    def give(self, seg: Segment) -> None:
        with self.lock:
            if self.closed or seg.doomed:
                self._drop(seg)
            else:
                self.free.append(seg)

    def retire(self, seg: Segment) -> None:
        """A segment someone else may still read or write: never reused."""
        with self.lock:
            self._drop(seg)

    def _drop(self, seg: Segment) -> None:
        self.total -= seg.size
        seg.close()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for seg in self.free:
                self._drop(seg)
            self.free.clear()


class Lease:
    """Exposes `size` bytes of a segment as an array source; calls `done` when the last
    array over it is gone (numpy keeps its `__array_interface__` owner alive)."""

    def __init__(self, buffer: Any, done: Any = None):
        base = np.frombuffer(buffer, np.uint8)
        self.__array_interface__ = base.__array_interface__
        self.base, self.done = base, done

    def view(self, offset: Any, nbytes: int) -> memoryview:
        """`nbytes` at `offset`; ValueError if that is not inside the segment."""
        size = self.base.nbytes
        if type(offset) is not int or not 0 <= offset <= size - nbytes:
            raise ValueError(f"{nbytes} bytes at {offset!r} outside a {size}-byte segment")
        return memoryview(np.asarray(self)[offset : offset + nbytes])

    def __del__(self) -> None:
        if self.done is not None:
            self.done()
