"""The client's side of shared memory (shm.py): which requests use segments, and when a
segment may be reused.

`Lender` decides per request: to a proxy whose workers share our node (`shm.node_key()`),
arrays of at least `shm.MIN_BYTES` go into a segment of the client's `shm.Pool` and the
request offers a reply segment sized by the method's last reply; the reply's arrays are
read in place (`reader`), and `settle` gives the segments back to the pool, or retires
them when the worker may still touch them. Used under the client's lock.

    lender = Lender(1 << 30); body, info = lender.body(pending, lender.local(proxy.node))
"""

from __future__ import annotations

from typing import Any

from driver.aux.shm import MIN_BYTES, Lease, Pool, node_key, supported
from driver.messaging.multipart import nbytes
from driver.messaging.payload import to_shm


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
        self.settle(pending, None)
        reply = max(pending.big, self.hints.get(pending.method, 0))
        if not local or not reply:
            return pending.body, None
        body = pending.body
        if pending.big:
            seg = self.pool.take(pending.big + 64 * len(body))
            placed = seg and to_shm(body, seg.place, MIN_BYTES)
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
        """payload.decode's `shm` for the reply: views of the offered segment (or of the
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
        big = sum(n for n in map(nbytes, body[1:]) if n >= MIN_BYTES) + pending.shared
        self.hints[pending.method] = big

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
