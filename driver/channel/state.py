"""The run's channel state: what the workers leave for the driver, held in the driver.

`RunChannel` is plain Python: driver.channel.server serves it from the driver's process
under one lock (workers call the methods in `server.WORKER_METHODS`; the driver's own
threads call it through `DriverChannel`).

- `Sink`: metrics rows (one per step, batched every second by driver.metrics.rank, drained
  by the driver every 2 s: driver.output.progress), failure records for the crash bundle,
  and where each rank runs (`pods_of`: the pods of a lost replica group, for a shrink;
  `ranks_on`: the ranks on Ray nodes that are draining, driver.channel.drain);
  a rank's `hello` returns its attempt: the run's first attempt
  in this driver (after the attempts already in metrics.jsonl, set by `begin`) plus the
  times this rank started before (worker-group restarts).
- `RunControl`: attempt counts per rank, the preemption notices: the run's (driver.channel.
  stops relays the driver's SIGTERM or SIGINT) and each rank's pod's termination (a worker
  that hears its own SIGTERM, driver.trainer.signals), and rank 0's final figures
  (`finish`: the driver never calls `ray.train.report`, a barrier across ranks).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

MAX_RANK = 1 << 20
NOTICE_MAX_AGE_S = 600.0
"""A termination notice older than this when it arrives is refused (a clock far off)."""
MAX_RANKS_ASKED = 1 << 16


class RunControl:
    """Attempt counts per rank, the time of a preemption notice, rank 0's final figures."""

    def __init__(self) -> None:
        self.starts: dict[int, int] = {}
        self.notice_at: float | None = None
        self.ending: dict[int, float] = {}
        """Rank -> wall-clock time its pod's termination was heard (the first one heard
        since the rank's newest start)."""
        self.started_at: dict[int, float] = {}
        """Rank -> wall-clock time of its newest start (a termination heard before it was
        its previous process's: Ray Train's teardown of a worker group signals it too)."""
        self.outcome: dict = {}

    def finish(self, outcome: dict) -> None:
        """Rank 0's final checkpoint metrics (Ray Train keeps only checkpoint reports')."""
        self.outcome = dict(outcome)

    def final(self) -> dict:
        return dict(self.outcome)

    def start(self, rank: int) -> int:
        """Record that `rank` started; how many times it had started before (the attempt)."""
        attempt = self.starts.get(rank, 0)
        self.starts[rank] = attempt + 1
        self.started_at[rank] = time.time()
        return attempt

    def restarts(self) -> int:
        """Worker-group restarts so far."""
        return max(self.starts.values(), default=1) - 1

    def preempt(self, at: float) -> None:
        """A preemption notice that arrived at wall-clock time `at` (the first one counts)."""
        if self.notice_at is None:
            self.notice_at = at

    def terminating(self, rank: int, at: float) -> None:
        """A worker says `rank`'s pod is being terminated since wall-clock time `at` (no
        later than now: a clock ahead of the driver's never lengthens the time left)."""
        rank, at = valid_rank(rank), valid_time(at)
        heard = self.ending.get(rank)
        if heard is None or heard < self.started_at.get(rank, -math.inf):  # none this start
            self.ending[rank] = at

    def notice(self, ranks: list[int] | None = None) -> dict:
        """What a worker polls: `run`, the run's notice (every rank stops), and `pods`, the
        first termination heard of a pod hosting one of `ranks` (any rank: None), since
        that rank's newest start (an earlier one ended the rank's previous process, which
        a worker-group restart or a replaced replica group has already replaced)."""
        if ranks is None:
            asked = list(self.ending)
        else:
            if not isinstance(ranks, list) or len(ranks) > MAX_RANKS_ASKED:
                raise ValueError("ranks: a list of at most 65536 ranks")
            asked = [r for r in map(valid_rank, ranks) if r in self.ending]
        since = self.started_at
        times = [self.ending[r] for r in asked if self.ending[r] >= since.get(r, -math.inf)]
        return {"run": self.notice_at, "pods": min(times, default=None)}

    def terminations(self) -> dict[int, float]:
        """Rank -> when its pod's termination was heard."""
        return dict(self.ending)


def valid_rank(rank) -> int:
    """A rank from a worker: an int in [0, MAX_RANK) (ValueError otherwise)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < MAX_RANK:
        raise ValueError(f"rank: an integer in [0, {MAX_RANK}), not {rank!r:.40}")
    return rank


def valid_node_id(node) -> str:
    """A Ray node id from a worker: hex digits, at most 64 ("" when unknown)."""
    if not isinstance(node, str) or len(node) > 64 or node.strip("0123456789abcdef"):
        raise ValueError(f"ray_node: a Ray node id in hex, not {node!r:.40}")
    return node


def valid_time(at, now: float | None = None) -> float:
    """A notice's wall-clock time from a worker: a finite number at most
    NOTICE_MAX_AGE_S old; one ahead of now counts as now (ValueError otherwise)."""
    now = time.time() if now is None else now
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise ValueError(f"at: a time in seconds, not {at!r:.40}")
    if at < now - NOTICE_MAX_AGE_S:
        raise ValueError(f"at: more than {NOTICE_MAX_AGE_S:g} s ago")
    return min(float(at), now)


def exclusive_pods(hosts: dict[int, dict], ranks: list[int]) -> list[str]:
    """The pods every one of whose ranks is in `ranks` (a pod that also hosts another
    rank is never one of them), sorted."""
    wanted = set(ranks)
    pods: dict[str, bool] = {}
    for rank, host in hosts.items():
        pod = host.get("pod")
        if pod:
            pods[pod] = pods.get(pod, True) and rank in wanted
    return sorted(pod for pod, only in pods.items() if only)


def dead_pods(nodes: list[dict]) -> set[str]:
    """Pods whose Ray node is dead and not back (`ray.nodes()`: a worker pod's raylet
    registers the pod's hostname, which Kubernetes sets to the pod name)."""
    alive = {n.get("NodeManagerHostname") for n in nodes if n.get("Alive")}
    return {n.get("NodeManagerHostname") for n in nodes if not n.get("Alive")} - alive - {None}


class Sink:
    """Metrics rows and failure records from the workers, held until the driver drains them."""

    def __init__(self):
        self.rows: list[dict] = []
        self.failures: dict[int, dict] = {}
        self.hosts: dict[int, dict] = {}
        self.first_attempt = 0
        self.hellos: dict[int, int] = {}
        self.ray_nodes: dict[int, str] = {}
        """Rank -> the Ray node (hex id) of its newest start (driver.channel.drain)."""
        self.dead_pods: Callable[[], set[str]] | None = None
        """The pods whose Ray node is dead (start_channel: from `ray.nodes()`)."""

    def begin(self, first_attempt: int) -> None:
        """The attempt number of this driver's first worker group."""
        self.first_attempt = int(first_attempt)

    def hello(self, rank: int, host: dict, ray_node: str = "") -> int:
        """Where a rank runs ({"pod", "node"}; its Ray node's id), sent once when it
        starts; its attempt."""
        node = valid_node_id(ray_node)
        attempt = self.first_attempt + self.hellos.get(rank, 0)
        self.hellos[rank] = self.hellos.get(rank, 0) + 1
        self.hosts[rank] = {**host, "attempt": attempt}
        self.ray_nodes[rank] = node
        return attempt

    def ranks_on(self, ray_nodes: list[str]) -> list[int]:
        """The ranks whose newest start was on one of these Ray nodes (hex ids)."""
        wanted = set(ray_nodes)
        return sorted(rank for rank, node in self.ray_nodes.items() if node and node in wanted)

    def host(self, rank: int) -> dict:
        return dict(self.hosts.get(rank, {}))

    def pods_of(self, ranks: list[int]) -> dict[str, bool]:
        """The pods that host only ranks in `ranks` (by each rank's newest hello), each
        with whether its Ray node is known dead (driver.ft.lost asks before a shrink)."""
        pods = exclusive_pods(self.hosts, [int(r) for r in ranks])
        dead = self.dead_pods() if pods and self.dead_pods is not None else set()
        return {pod: pod in dead for pod in pods}

    def all_hosts(self) -> dict[int, dict]:
        return {rank: dict(host) for rank, host in self.hosts.items()}

    def push(self, row: dict) -> None:
        self.rows.append(row)

    def push_many(self, rows: list[dict]) -> None:
        """Several rows in one message (one per batch of steps, not per step)."""
        self.rows.extend(rows)

    def drain(self) -> list[dict]:
        rows, self.rows = self.rows, []
        return rows

    def fail(self, rank: int, record: dict) -> None:
        self.failures[rank] = record

    def get_failures(self) -> dict[int, dict]:
        return dict(self.failures)


class RunChannel(Sink, RunControl):
    """The run's channel state: metric rows and failure records from the workers (Sink),
    and attempt counts and preemption notices (driver.channel.stops's RunControl).
    Plain Python: driver.channel serves it from the driver's process, under one lock."""

    def __init__(self):
        Sink.__init__(self)
        RunControl.__init__(self)
