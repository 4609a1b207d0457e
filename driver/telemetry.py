"""The run's channel state, and the log tail of each worker.

Every rank sends its metrics rows (one per step, batched every second:
driver.metrics.rank) to the run's channel (driver/channel: a ZeroMQ socket the driver
serves, fire-and-forget, so a step never waits on the driver); the driver drains it every
2 s (driver.progress.POLL_S). A rank's `hello` returns its attempt: the run's first attempt
in this driver (after the attempts already in metrics.jsonl, set by `begin`) plus the times
this rank started before (worker-group restarts). Any rank that fails records its traceback
and last log lines there before it re-raises, for the crash bundle. Rank 0 leaves the run's
final figures there too (`finish`): the driver never calls `ray.train.report`, a barrier
across ranks.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import deque
from collections.abc import Callable

from catalog import labels
from driver.checkpoint.control import RunControl

LOGGER_NAME = "driver.worker"


def log_format(tags: dict | None = None) -> str:
    """A worker's log line format: time, level, its labels (`rank=1 attempt=0`), message."""
    labelled = "".join(f"{k}={v} " for k, v in (tags or {}).items() if v not in ("", None))
    return f"%(asctime)s %(levelname)s {labelled}%(message)s".replace("  ", " ")


class LogTail(logging.Handler):
    """Keeps the last `capacity` formatted log lines of this process."""

    def __init__(self, capacity: int, tags: dict | None = None):
        super().__init__()
        self.lines: deque[str] = deque(maxlen=max(1, capacity))
        self.setFormatter(logging.Formatter(log_format(tags)))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def where_am_i() -> dict[str, str]:
    """This process's pod (the hostname, which Kubernetes sets to the pod name) and node
    (`NODE_NAME`, which the runner's pod templates pass down; the hostname elsewhere)."""
    host = socket.gethostname()
    return {"pod": host, "node": os.environ.get(labels.NODE_NAME_ENV) or host}


def worker_logger(capacity: int, tags: dict | None = None) -> tuple[logging.Logger, LogTail]:
    """The worker's logger: every line into the tail, warnings also to stderr; each line
    with the rank's labels (`tags`: rank, attempt, pod, node)."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    tail = LogTail(capacity, tags)
    stderr = logging.StreamHandler()
    stderr.setFormatter(logging.Formatter(log_format(tags)))
    stderr.setLevel(logging.WARNING)
    logger.addHandler(tail)
    logger.addHandler(stderr)
    return logger, tail


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
        self.dead_pods: Callable[[], set[str]] | None = None
        """The pods whose Ray node is dead (start_channel: from `ray.nodes()`)."""

    def begin(self, first_attempt: int) -> None:
        """The attempt number of this driver's first worker group."""
        self.first_attempt = int(first_attempt)

    def hello(self, rank: int, host: dict) -> int:
        """Where a rank runs ({"pod", "node"}), sent once when it starts; its attempt."""
        attempt = self.first_attempt + self.hellos.get(rank, 0)
        self.hellos[rank] = self.hellos.get(rank, 0) + 1
        self.hosts[rank] = {**host, "attempt": attempt}
        return attempt

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
    and attempt counts and preemption notices (driver.checkpoint.control's RunControl).
    Plain Python: driver.channel serves it from the driver's process, under one lock."""

    def __init__(self):
        Sink.__init__(self)
        RunControl.__init__(self)


def start_channel():
    """The run's channel, served by this (the driver's) process: on the loopback address
    when this process started the Ray it runs on (a local run: every worker is on this
    machine), else on this node's IP (the workers on other nodes connect)."""
    import ray

    from driver.channel import DriverChannel
    from driver.embedded import started_here

    host = "127.0.0.1" if started_here() else ray.util.get_node_ip_address()
    state = RunChannel()
    state.dead_pods = lambda: dead_pods(ray.nodes())
    return DriverChannel.start(state, host)
