"""Large arrays between a rank and a worker on one node, through shared memory.

Over TCP and IPC a 16 MiB array is copied by the kernel twice per socket hop (four hops
there and back) and lands in fresh pages each time (a page fault per 4 KiB, slow in a VM).
When the rank and its proxy's node share a kernel and a PID namespace (`node_key()` equal:
the proxy reports its own in its pongs), the client instead copies each array of at least
`MIN_BYTES` into a segment of its `Pool` (memfd, pre-faulted once, reused), and the frame
carries only a reference; the worker maps the segment through
`/proc/<pid>/fd/<fd>` (checking the inode: `[token, pid, fd, inode, offset]`) into
`Attached`, an LRU of mappings, and reads the arrays in place. The
request also offers a reply segment (`"rs"` in its envelope's info): the worker copies big
reply arrays into it, and the client hands them out as views whose segment goes back to
the pool when the last view dies. Nothing outlives the owning process (memfds have no
name); a segment the worker might still touch (a handler kept a view, the request timed
out, was cancelled or re-sent) is retired, never reused. Elsewhere frames travel as before.

    pool = Pool(1 << 30); seg = pool.take(n); ...; pool.give(seg)   # client side
    view = Attached().view(ref, nbytes)                            # worker side
"""

from __future__ import annotations

import mmap
import os
import secrets
import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

MIN_BYTES = 1 << 20  # arrays below this travel as frames: a copy costs less than the setup
SEGMENT_MIN = 1 << 20
PREFIX = "aux-shm-"  # memfd name: a worker maps nothing else
_NONCE = secrets.token_hex(4)
_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


def node_key() -> str:
    """Who may map our segments: same boot (kernel), PID namespace and user."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}/{os.getuid()}"
    except OSError:
        return ""  # no /proc: no shared memory


def supported() -> bool:
    return hasattr(os, "memfd_create") and bool(node_key())


class Segment:
    """One memfd mapping owned by this process; `ref(offset)` names a place in it."""

    def __init__(self, size: int, serial: int):
        self.size, self.token = size, f"{_NONCE}.{os.getpid()}.{serial}"
        self.fd = os.memfd_create(f"{PREFIX}{serial}", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.map = mmap.mmap(self.fd, size, flags=_FLAGS)
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
        self.limit, self.total, self.serial = limit, 0, 0
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
            self.serial += 1
            self.total += size
        try:
            return Segment(size, self.serial)
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


class Attached:
    """A worker's mappings of its ranks' segments, most recently used kept."""

    def __init__(self, max_maps: int = 64, max_bytes: int = 2 << 30):
        self.max_maps, self.max_bytes = max_maps, max_bytes
        self.maps: OrderedDict[str, mmap.mmap] = OrderedDict()

    def segment(self, ref: Any) -> mmap.mmap:
        """The mapping named by `ref` ([token, pid, fd, inode, offset]); ValueError if the
        reference is malformed or the segment is not (or no longer) reachable."""
        ok = isinstance(ref, list) and len(ref) == 5 and isinstance(ref[0], str)
        if not ok or not all(type(v) is int and v >= 0 for v in ref[1:]):
            raise ValueError(f"shared-memory reference {ref!r}")
        token, pid, fd, inode, _ = ref
        found = self.maps.get(token)
        if found is not None:
            self.maps.move_to_end(token)
            return found
        path = f"/proc/{pid}/fd/{fd}"
        try:
            handle = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as err:
            raise ValueError(f"shared memory of process {pid} not reachable ({err})") from None
        try:  # only our clients' segments (what was opened, not what the path named before)
            if not os.readlink(f"/proc/self/fd/{handle}").startswith(f"/memfd:{PREFIX}"):
                raise ValueError(f"{path} is not a shared-memory segment")
            if os.fstat(handle).st_ino != inode:
                raise ValueError(f"shared memory {token} is gone")
            found = mmap.mmap(handle, os.fstat(handle).st_size, flags=_FLAGS)
        finally:
            os.close(handle)
        self.maps[token] = found
        while len(self.maps) > self.max_maps or self._bytes() > self.max_bytes:
            self._evict()
        return found

    def _bytes(self) -> int:
        return sum(len(m) for m in self.maps.values())

    def _evict(self) -> None:
        _, old = self.maps.popitem(last=False)
        try:
            old.close()
        except BufferError:
            pass  # a handler still holds a view: unmapped when that goes

    def close(self) -> None:
        while self.maps:
            self._evict()


class Borrowed:
    """One request's use of its rank's segments at a worker: `read` resolves the request's
    references (wire.decode's `shm`), `reply` moves big reply frames into the segment the
    request offers, `kept` says whether anything still holds a view of the request's."""

    def __init__(self, attached: Attached):
        self.attached, self.leases, self.refs = attached, {}, {}

    def read(self, ref: Any, nbytes: int) -> memoryview:
        token = ref[0] if isinstance(ref, list) and ref else None
        lease = self.leases.get(token)
        if lease is None:
            lease = self.leases[token] = Lease(self.attached.segment(ref))
            self.refs[token] = ref
        return lease.view(ref[4], nbytes)

    def _within(self, src: np.ndarray) -> list[Any] | None:
        """The reference of `src` if it lies in one of the request's segments (a handler
        that answers with its input, or part of it): the rank reads it there, no copy."""
        addr = src.__array_interface__["data"][0]
        for token, lease in self.leases.items():
            base = lease.base.__array_interface__["data"][0]
            if base <= addr and addr + src.nbytes <= base + lease.base.nbytes:
                return [*self.refs[token][:4], addr - base]
        return None

    def reply(self, body: list[Any], offer: Any) -> list[Any]:
        """`body` with its big frames in the offered segment (those that fit)."""
        from driver.aux import wire

        try:
            seg = self.attached.segment(offer)
        except ValueError as err:
            raise wire.WireError("garbage", f"reply segment: {err}") from None
        at = [offer[4]]

        def place(frame: Any) -> list[Any] | None:
            src = np.frombuffer(frame, np.uint8)
            there = self._within(src)
            if there is not None:
                return there
            start = (at[0] + 63) & ~63
            if start + src.nbytes > len(seg):
                return None
            np.copyto(np.frombuffer(seg, np.uint8, src.nbytes, start), src)
            at[0] = start + src.nbytes
            return [*offer[:4], start]

        return wire.to_shm(body, place, MIN_BYTES) or body

    def kept(self) -> bool:
        """Whether a view of the request's segments is still alive (the caller has dropped
        its own references first): then the rank must not reuse them."""
        refs = [weakref.ref(lease) for lease in self.leases.values()]
        self.leases.clear()
        return any(ref() is not None for ref in refs)


class Lender:
    """A client's side: which requests go through shared memory, with which segments, and
    what becomes of the segments when a request settles. Used under the client's lock."""

    def __init__(self, limit: int):
        self.pool = Pool(limit) if limit > 0 and supported() else None
        self.node = node_key()
        self.hints: dict[str, int] = {}  # method -> bytes of big arrays in its last reply

    def local(self, node: Any) -> bool:
        return self.pool is not None and bool(node) and node == self.node

    def body(self, pending: Any, local: bool) -> tuple[list[Any], dict | None]:
        """The body and envelope info to send `pending` with (to a proxy whose workers
        share our node when `local`). Segments of an earlier attempt are retired."""
        from driver.aux import wire

        self.settle(pending, None)
        reply = max(pending.big, self.hints.get(pending.method, 0))
        if not local or not reply:
            return pending.body, None
        body = pending.body
        if pending.big:
            seg = self.pool.take(pending.big + 64 * len(body))
            placed = seg and wire.to_shm(body, seg.place, MIN_BYTES)
            if placed:
                body, pending.segs = placed, [seg]
            elif seg is not None:
                self.pool.give(seg)
        seg = self.pool.take(reply + 64 * 16)
        if seg is None:
            return body, None
        pending.reply_seg = seg
        return body, {"rs": seg.ref(0)}

    def reader(self, pending: Any) -> Any:
        """wire.decode's `shm` for the reply: views of the offered segment (or of the
        request's own, when the worker answered with its input), each going back to the
        pool when the last of its views is gone."""
        pool = self.pool
        owned = {s.token: s for s in (*pending.segs, pending.reply_seg) if s is not None}
        if not owned:
            return None

        def read(ref: Any, nbytes: int) -> memoryview:
            seg = owned.get(ref[0]) if isinstance(ref, list) and len(ref) == 5 else None
            if seg is None:
                raise ValueError(f"reply names a segment not ours: {ref!r}")
            pending.leases = pending.leases or {}
            lease = pending.leases.get(seg.token)
            if lease is None:
                lease = pending.leases[seg.token] = Lease(seg.map, lambda: pool.give(seg))
            pending.shared += nbytes
            return lease.view(ref[4], nbytes)

        return read

    def settle(self, pending: Any, info: dict | None) -> None:
        """The request is answered (`info`: its reply's) or given up (None: the worker may
        still touch its segments, so they are retired)."""
        segs, reply_seg, leased = pending.segs, pending.reply_seg, pending.leases or {}
        pending.segs, pending.reply_seg, pending.leases = [], None, None
        if self.pool is None or not (segs or reply_seg):
            return
        keep = info is not None and not info.get("kept")
        for seg in segs:
            if seg.token in leased:  # the reply's arrays are views of it: back when they go
                seg.doomed = not keep
            else:
                (self.pool.give if keep else self.pool.retire)(seg)
        if reply_seg is not None and reply_seg.token not in leased:  # the reply did not use it
            (self.pool.give if info is not None else self.pool.retire)(reply_seg)

    def learn(self, pending: Any, body: list[Any]) -> None:
        """Remember how big the method's reply arrays were: later calls offer room."""
        big = sum(n for n in map(_nbytes, body[1:]) if n >= MIN_BYTES) + pending.shared
        self.hints[pending.method] = big

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def _nbytes(frame: Any) -> int:
    return frame.nbytes if isinstance(frame, memoryview) else len(frame)
