"""One hostile-peer suite per serving loop: the cases in turn from many peers, a
legitimate call every `CHECK_EVERY` cases, and the figures.

    report = run("channel", cases=1000, limit=64 << 20)
    print(report.line())

Kinds of case a suite sends are listed in its `KINDS` (`HEAVY` of them move about a whole
message limit: each is sent at most `cases.HEAVY` times). Figures (`Report`): serving
threads lost (the target's thread is not alive at the end), legitimate calls that failed,
loop restarts, refusals by reason, and the target process's memory: RSS growth from after
the warm-up to after the suite, and its peak over the suite, per peer.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field

import zmq

from driver.messaging import wire
from tests.hostile import cases as c
from tests.hostile.diloco import LearnerSuite, SynchronizerSuite
from tests.hostile.peers import ChannelSuite, ProxySuite, WorkerSuite

SUITES = {
    "proxy": ProxySuite,
    "worker": WorkerSuite,
    "channel": ChannelSuite,
    "synchronizer": SynchronizerSuite,
    "learner": LearnerSuite,
}
CHECK_EVERY = 50
PEERS = 8
MIB = 1 << 20


@dataclass
class Report:
    loop: str
    peers: int = PEERS
    cases: int = 0
    kinds: Counter = field(default_factory=Counter)
    checks: int = 0
    failed_checks: int = 0
    threads_lost: int = 0
    restarts: int = 0
    refused: dict = field(default_factory=dict)
    rss_before: int = 0
    rss_after: int = 0
    peak: int = 0
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)

    @property
    def growth_per_peer_mib(self) -> float:
        return max(0, self.rss_after - self.rss_before) / self.peers / MIB

    @property
    def peak_per_peer_mib(self) -> float:
        return self.peak_mib / self.peers

    @property
    def peak_mib(self) -> float:
        """The serving process's peak RSS over the suite above its RSS before it."""
        return max(0, self.peak - self.rss_before) / MIB

    def line(self) -> str:
        return (
            f"{self.loop:<12} {self.cases:5d} cases {len(self.kinds):2d} kinds {self.peers} peers"
            f"  threads lost {self.threads_lost}  failed calls {self.failed_checks}/{self.checks}"
            f"  restarts {self.restarts}  memory growth {self.growth_per_peer_mib:6.2f} MiB/peer"
            f"  (peak {self.peak_per_peer_mib:7.2f} MiB/peer, {self.peak_mib:6.1f} MiB in all)"
            f"  {self.seconds:5.1f} s"
        )


def schedule(kinds: tuple, heavy: tuple, n: int, rng: random.Random) -> list[str]:
    """`n` kinds, every kind in turn (each round shuffled), heavy ones at most c.HEAVY."""
    out: list[str] = []
    used: Counter = Counter()
    while len(out) < n:
        batch = list(kinds)
        rng.shuffle(batch)
        for kind in batch:
            if kind in heavy and used[kind] >= c.HEAVY:
                continue
            used[kind] += 1
            out.append(kind)
    return out[:n]


def run(loop: str, cases: int, limit: int, seed: int = 0, peers: int = PEERS) -> Report:
    """Run `cases` hostile cases against `loop`'s serving loop (`limit`: its message limit)."""
    suite = SUITES[loop](limit, peers)
    report = Report(loop, peers=suite.peers)
    try:
        suite.warm()
        report.rss_before = suite.target.ask("reset_peak")["rss"]
        rng = random.Random(seed)
        start = time.monotonic()
        for i, kind in enumerate(schedule(suite.KINDS, suite.HEAVY, cases, rng)):
            suite.send(kind, i, rng)
            report.kinds[kind] += 1
            report.cases += 1
            if (i + 1) % CHECK_EVERY == 0:
                _check(suite, report)
        suite.settle()
        _check(suite, report)
        report.seconds = time.monotonic() - start
        stats = suite.target.ask("stats")
        report.stats, report.rss_after, report.peak = stats, stats["rss"], stats["peak"]
        report.threads_lost = 0 if stats["alive"] else 1
        report.restarts = suite.restarts(stats)
        report.refused = suite.refused(stats)
    finally:
        suite.close()
    return report


def _check(suite, report: Report) -> None:
    suite.drain()
    report.checks += 1
    try:
        ok = suite.check()
    except (zmq.ZMQError, RuntimeError, OSError, wire.WireError):
        ok = False
    report.failed_checks += not ok
