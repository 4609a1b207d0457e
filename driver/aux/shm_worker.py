"""The worker's side of shared memory (shm.py): its ranks' segments, mapped and read.

`Attached` maps a segment named by a rank's reference (`[token, pid, fd, inode, offset]`)
through `/proc/<pid>/fd/<fd>`, after checking that what it opened is one of our clients'
memfds (`shm.PREFIX` name) with that inode, sealed against shrinking (`shm.SEALS`: a
segment cut short under a mapping would fault the worker), and no bigger than
`max_segment` (checked before the mapping, which allocates its pages); it keeps the newest
mappings (an LRU, within `max_maps` and `max_bytes`, room made before a new one is mapped).
`Borrowed` is one request's use of them: it resolves the request's array references for
`payload.decode`, moves big reply frames into the segment the request offers, and says
whether the handler still holds a view (then the rank must not reuse the segments).

    attached = Attached(); shared = Borrowed(attached)
    payload = decode(msg.body, shm=shared.read); body = shared.reply(body, offer)
"""

from __future__ import annotations

import fcntl
import mmap
import os
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from driver.aux.shm import MAP_FLAGS, MIN_BYTES, PREFIX, SEALS, Lease
from driver.messaging.envelope import WireError
from driver.messaging.payload import to_shm


class Attached:
    """A worker's mappings of its ranks' segments, most recently used kept."""

    def __init__(self, max_maps: int = 64, max_bytes: int = 2 << 30, max_segment: int = 1 << 30):
        self.max_maps, self.max_bytes = max_maps, max_bytes
        self.max_segment = min(max_segment, max_bytes)
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
            size = _checked(handle, inode, token, self.max_segment)
            while self.maps and (
                len(self.maps) >= self.max_maps or self._bytes() + size > self.max_bytes
            ):
                self._evict()
            found = mmap.mmap(handle, size, flags=MAP_FLAGS)
        finally:
            os.close(handle)
        self.maps[token] = found
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


def _checked(handle: int, inode: int, token: str, max_segment: int) -> int:
    """The size of the opened segment once it is known to be the one named, sealed and
    within `max_segment` (ValueError otherwise)."""
    stat = os.fstat(handle)
    if stat.st_ino != inode:
        raise ValueError(f"shared memory {token} is gone")
    try:
        seals = fcntl.fcntl(handle, fcntl.F_GET_SEALS)
    except OSError:
        seals = 0
    if seals & SEALS != SEALS:
        raise ValueError(f"shared memory {token} is not sealed against resizing")
    if not 0 < stat.st_size <= max_segment:
        raise ValueError(f"shared memory {token} of {stat.st_size} bytes, limit {max_segment}")
    return stat.st_size


class Borrowed:
    """One request's use of its rank's segments at a worker: `read` resolves the request's
    references (payload.decode's `shm`), `reply` moves big reply frames into the segment the
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
        try:
            seg = self.attached.segment(offer)
        except ValueError as err:
            raise WireError("garbage", f"reply segment: {err}") from None
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

        return to_shm(body, place, MIN_BYTES) or body

    def kept(self) -> bool:
        """Whether a view of the request's segments is still alive (the caller has dropped
        its own references first): then the rank must not reuse them."""
        refs = [weakref.ref(lease) for lease in self.leases.values()]
        self.leases.clear()
        return any(ref() is not None for ref in refs)
