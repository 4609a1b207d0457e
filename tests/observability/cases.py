"""The injected-straggler cases and how a result is judged against them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from observability.synthetic import Scenario, Slow, slow_node

KINDS = ("single", "intermittent", "two", "node")
RANKS, PER_NODE = 64, 8


@dataclass
class Case:
    kind: str
    scenario: Scenario
    ranks: set[int]
    nodes: set[str]


def case(kind: str, seed: int, seconds: float = 45.0) -> Case:
    """One rank 1.3x slower; two ranks slowed in 30% of the steps; two ranks on different
    nodes at once (1.3x and 1.2x); every rank of one node 1.3x. Which ones: from the seed."""
    rng = np.random.default_rng(10_000 + seed)
    first, second = (int(r) for r in rng.choice(RANKS, size=2, replace=False))
    while first // PER_NODE == second // PER_NODE:
        second = int(rng.integers(RANKS))
    if kind == "single":
        slow = (Slow((first,), 1.3),)
    elif kind == "intermittent":
        slow = (Slow((first,), 1.3, 0.3), Slow((second,), 1.3, 0.3))
    elif kind == "two":
        slow = (Slow((first,), 1.3), Slow((second,), 1.2))
    else:
        slow = (slow_node(first // PER_NODE, PER_NODE),)
    sc = Scenario(ranks=RANKS, ranks_per_node=PER_NODE, seconds=seconds, slow=slow)
    ranks = {r for s in slow for r in s.ranks}
    return Case(kind, sc, ranks, {sc.node_of(r) for r in ranks})


def window_of(cols: dict, window_s: int = 30) -> np.ndarray:
    """Each record's instance window (the first record of its instance), epoch seconds."""
    key = cols["seq"].astype(np.int64) * 2 + cols["collective"]
    first = np.full(key.max() + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, key, cols["ts_us"])
    return first[key] // 1_000_000 // window_s * window_s


def injected_means(cols: dict) -> dict[tuple[int, int], float]:
    """Mean injected delay per (window, rank) over the records (the truth to estimate)."""
    window = window_of(cols)
    out = {}
    for w in np.unique(window):
        sel = window == w
        sums = np.bincount(cols["rank"][sel], weights=cols["injected_us"][sel])
        counts = np.bincount(cols["rank"][sel])
        out.update({(int(w), r): sums[r] / counts[r] for r in range(len(counts)) if counts[r]})
    return out


def judge(c: Case, cols: dict, ranks: list[dict], nodes: list[dict], tol=0.10) -> list[str]:
    """What the analysis got wrong (empty: right): per window, the named ranks and nodes
    are exactly the injected ones, and each named rank's delay is within `tol` of the
    injected mean delay."""
    wrong = []
    truth = injected_means(cols)
    windows = sorted({epoch(r["window"]) for r in ranks})
    if not windows:
        return ["no windows"]
    for w in windows:
        named = {r["rank"]: r for r in ranks if epoch(r["window"]) == w and r["straggler"]}
        if set(named) != c.ranks:
            wrong.append(f"window {w}: ranks {sorted(named)} != {sorted(c.ranks)}")
        for rank, row in named.items():
            want = truth.get((w, rank), 0.0)
            if not want or abs(row["delay_us"] - want) > tol * want:
                wrong.append(f"window {w}: rank {rank} delay {row['delay_us']:.0f} vs {want:.0f}")
        bad = {n["node"] for n in nodes if epoch(n["window"]) == w and n["straggler"]}
        if bad != c.nodes:
            wrong.append(f"window {w}: nodes {sorted(bad)} != {sorted(c.nodes)}")
    return wrong


def epoch(window) -> int:
    """Epoch seconds of a window as chDB (`'YYYY-MM-DD hh:mm:ss'`) or pandas (us) gives it."""
    if isinstance(window, str):
        from datetime import UTC, datetime

        return int(datetime.strptime(window, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp())
    return int(window) // 1_000_000
