"""Routing and queueing decisions of the auxiliary-service transport, as pure logic.

- `SmoothWeightedRoundRobin`: a rank spreads a service's requests over its links, weight
  = the proxy's live worker count, interleaved (weights 2:1 give a b a, never a a b);
  weight 0 is skipped.
- `link_weights`: those weights when some of the service's workers are on the rank's own
  node and called directly: the node keeps its requests while its workers are at least
  its share of the service's workers, and sends only the rest to the other nodes' proxies.
- `split_links`: which of a service's proxies and workers a rank on a given node calls.
- `RoundRobin`, `pick_worker`: a proxy forwards to its live workers in turn, skipping one
  that has fallen behind the others.
- `FairQueues`: a worker's bounded FIFO per training rank, dequeued round robin over the
  ranks that have work, so one busy rank cannot monopolise the worker.
- `admit`: the back-pressure decision for a request that finds its rank's queue full.

    wrr = SmoothWeightedRoundRobin({"a": 2, "b": 1}); [wrr.next() for _ in range(3)]  # a b a
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

POLICIES = ("wait", "fail_fast")


class SmoothWeightedRoundRobin:
    """nginx's smooth weighted round robin: each pick adds every weight to its current
    score, takes the highest and subtracts the total from it."""

    def __init__(self, weights: dict[Hashable, int] | None = None):
        self.weights: dict[Hashable, int] = {}
        self.current: dict[Hashable, int] = {}
        self.set_weights(weights or {})

    def set_weights(self, weights: dict[Hashable, int]) -> None:
        """Replace the weights (negative counts as 0); scores of kept keys carry over."""
        self.weights = {key: max(0, int(w)) for key, w in weights.items()}
        self.current = {key: self.current.get(key, 0) for key in self.weights}

    def set_weight(self, key: Hashable, weight: int) -> None:
        self.set_weights({**self.weights, key: weight})

    def next(self, exclude: Iterable[Hashable] = ()) -> Hashable | None:
        """The next key, or None when every (non-excluded) weight is 0."""
        skip = set(exclude)
        live = {k: w for k, w in self.weights.items() if w > 0 and k not in skip}
        if not live:
            return None
        total = sum(live.values())
        for key, weight in live.items():
            self.current[key] += weight
        best = max(live, key=lambda k: self.current[k])
        self.current[best] -= total
        return best


def link_weights(local: dict[Hashable, int], remote: dict[Hashable, int],
                 share: float | None, scale: int = 1000) -> dict[Hashable, int]:  # fmt: skip
    """Weights of a rank's links: `local` {its node's worker: 1 live, 0 not}, called
    directly, and `remote` {another node's proxy: its live workers}. `share` is the node's
    share of the service's callers (its ranks ÷ all ranks; None: unknown). The node's
    requests stay on its live workers as long as they are at least `share` of all live
    workers (remote proxies weigh 0 then: kept as a fallback); with fewer, the node keeps
    the part its workers can take at an even load per worker (live local ÷ all live ÷
    `share`) and sends the rest to the proxies by their live workers. No live local worker:
    the proxies' own weights."""
    live = sum(1 for w in local.values() if w > 0)
    remote = {key: max(0, int(w)) for key, w in remote.items()}
    others = sum(remote.values())
    out = dict.fromkeys(local, 0)
    if not live:
        return {**out, **remote}
    keep = 1.0 if not share or share <= 0 or not others else live / (live + others) / share
    if keep >= 1.0:
        return {**out, **{k: 1 for k, w in local.items() if w > 0}, **dict.fromkeys(remote, 0)}
    each = max(1, round(keep * scale / live))
    out.update({key: each for key, w in local.items() if w > 0})
    rest = (1.0 - keep) * scale / others
    return {**out, **{key: max(1, round(w * rest)) if w else 0 for key, w in remote.items()}}


def split_links(proxies: dict[str, int], nodes: dict[str, str], workers: dict[str, list[str]],
                here: str | None) -> tuple[dict[str, int], list[str]]:  # fmt: skip
    """(proxies to call, workers to call directly) for a rank on node `here`: the workers
    on its node (`workers`: {node: their endpoints}) and every proxy on another node
    (`nodes`: {proxy address: its node}); on a node without workers of the service, or
    where the node is unknown (None), every proxy and no worker."""
    local = list(workers.get(here, [])) if here is not None else []
    if not local:
        return dict(proxies), []
    return {a: w for a, w in proxies.items() if nodes.get(a) != here}, local


class RoundRobin:
    """Plain round robin over a changing set of keys (order of insertion)."""

    def __init__(self, keys: Iterable[Hashable] = ()):
        self.keys = list(keys)
        self.position = 0

    def set_keys(self, keys: Iterable[Hashable]) -> None:
        self.keys = list(keys)

    def next(self, exclude: Iterable[Hashable] = ()) -> Hashable | None:
        skip = set(exclude)
        for _ in range(len(self.keys)):
            key = self.keys[self.position % len(self.keys)]
            self.position = (self.position + 1) % len(self.keys)
            if key not in skip:
                return key
        return None


def pick_worker(rr: RoundRobin, inflight: dict[Hashable, int], skew: int) -> Hashable | None:
    """The proxy's choice among live workers ({worker: requests it holds}): round robin,
    skipping a worker that holds more than `skew` requests over the least busy one."""
    if not inflight:
        return None
    floor = min(inflight.values())
    usable = {key for key, count in inflight.items() if count <= floor + skew}
    return rr.next(exclude=set(rr.keys) - usable)


class FairQueues:
    """One bounded FIFO per rank, dequeued round robin over ranks with work (O(1) per op)."""

    def __init__(self, bound: int):
        if bound < 1:
            raise ValueError(f"queue bound {bound} < 1")
        self.bound = bound
        self.queues: dict[int, deque[Any]] = {}
        self.ring: deque[int] = deque()  # ranks with a non-empty queue, in serving order
        self.size = 0

    def full(self, rank: int) -> bool:
        queue = self.queues.get(rank)
        return queue is not None and len(queue) >= self.bound

    def depth(self, rank: int) -> int:
        queue = self.queues.get(rank)
        return len(queue) if queue else 0

    def push(self, rank: int, item: Any) -> bool:
        """Append `item` to `rank`'s queue; False (nothing changed) when it is full."""
        queue = self.queues.get(rank)
        if queue is None:
            queue = self.queues[rank] = deque()
        if len(queue) >= self.bound:
            return False
        if not queue:
            self.ring.append(rank)
        queue.append(item)
        self.size += 1
        return True

    def pop(self) -> tuple[int, Any] | None:
        """(rank, item) from the next rank in turn, or None when every queue is empty."""
        if not self.ring:
            return None
        rank = self.ring.popleft()
        queue = self.queues[rank]
        item = queue.popleft()
        self.size -= 1
        if queue:
            self.ring.append(rank)
        else:
            del self.queues[rank]
        return rank, item

    def remove(self, rank: int, predicate: Any) -> list[Any]:
        """Take out the items of `rank` matching `predicate` (cancels, expiries)."""
        queue = self.queues.get(rank)
        if not queue:
            return []
        taken = [item for item in queue if predicate(item)]
        if taken:
            kept = [item for item in queue if not predicate(item)]
            queue.clear()
            queue.extend(kept)
            self.size -= len(taken)
            if not queue:
                del self.queues[rank]
                self.ring.remove(rank)
        return taken

    def __len__(self) -> int:
        return self.size


def admit(full: bool, policy: str, now: float, deadline: float) -> str:
    """What to do with a request arriving at its rank's queue:
    "accept" (room), "expire" (deadline passed), "hold" (wait for room, policy "wait"),
    "refuse" (policy "fail_fast": the caller gets AuxQueueFull at once)."""
    if policy not in POLICIES:
        raise ValueError(f"full-queue policy {policy!r}: expected one of {POLICIES}")
    if now >= deadline:
        return "expire"
    if not full:
        return "accept"
    return "hold" if policy == "wait" else "refuse"
