"""Synthetic NCCL collective records with injected stragglers, columnar (numpy).

    from observability.synthetic import Scenario, Slow, generate
    cols = generate(Scenario(ranks=64, seconds=60, slow=(Slow(ranks=(5,), factor=1.3),)), seed=1)

The model: every step, each rank computes for `compute_us` (x `factor` when it is slowed)
plus a little jitter and then enters the world communicator's collective; the collective
ends `transfer_us` after the last rank arrived, so each rank's recorded duration is its wait
(last arrival - own arrival) plus the transfer, rounded to whole microseconds as the NCCL
Inspector writes them. A slowed rank arrives `(factor - 1) x compute_us` late: the injected
delay. Collectives alternate AllGather / ReduceScatter (two message sizes). One rank is one
process: node `node-<r // ranks_per_node>`, pod `w-<r // ranks_per_node>`, pid `1000 + r`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

COLLECTIVES = ("AllGather", "ReduceScatter")
COLUMNS = ("ts_us", "node", "pod", "pid", "comm_id", "collective", "msg_size_bytes", "seq",
           "rank", "n_ranks", "exec_time_us")  # fmt: skip
SIZES = (268_435_456, 67_108_864)


@dataclass(frozen=True)
class Slow:
    """Ranks slowed by `factor` in a fraction `probability` of the steps (1: always)."""

    ranks: tuple[int, ...]
    factor: float = 1.3
    probability: float = 1.0


@dataclass(frozen=True)
class Scenario:
    ranks: int = 64
    ranks_per_node: int = 8
    seconds: float = 60.0
    compute_us: float = 100_000.0
    transfer_us: float = 5_000.0
    jitter_us: float = 500.0
    """standard deviation of each rank's arrival around its nominal time."""
    slow: tuple[Slow, ...] = field(default_factory=tuple)

    @property
    def steps(self) -> int:
        return max(1, int(self.seconds * 1e6 // (self.compute_us + self.transfer_us)))

    def injected_delay_us(self, rank: int) -> float:
        """The injected arrival delay of `rank` when it is slowed (0 if never)."""
        return max([(s.factor - 1) * self.compute_us for s in self.slow if rank in s.ranks] or [0])

    def node_of(self, rank: int) -> str:
        return f"node-{rank // self.ranks_per_node}"


def slow_node(node: int, ranks_per_node: int = 8, factor: float = 1.3) -> Slow:
    """All ranks of one node slowed."""
    return Slow(tuple(range(node * ranks_per_node, (node + 1) * ranks_per_node)), factor)


def injected(sc: Scenario, rng: np.random.Generator, steps: int) -> np.ndarray:
    """The injected arrival delay of every rank in every step (steps x ranks, microseconds)."""
    delay = np.zeros((steps, sc.ranks))
    for slow in sc.slow:
        idx = np.asarray(slow.ranks)
        hit = rng.random((steps, idx.size)) < slow.probability
        late = np.where(hit, (slow.factor - 1) * sc.compute_us, 0.0)
        delay[:, idx] = np.maximum(delay[:, idx], late)
    return delay


def recent_start_us() -> int:
    """A start an hour ago on a whole minute (windows line up; inside the tables' TTL)."""
    return (int(time.time()) // 60 * 60 - 3600) * 1_000_000


def generate(
    sc: Scenario, seed: int = 0, steps: int | None = None, start_us: int | None = None
) -> dict[str, np.ndarray]:
    """The records as columns of `platform.nccl_collectives` (codes for the string columns:
    `node`/`pod` index `names(...)`; `comm_id`, `collective` likewise), plus the truth:
    `injected_us`, each record's injected arrival delay (not a table column)."""
    rng = np.random.default_rng(seed)
    t0 = recent_start_us() if start_us is None else start_us
    steps = steps or sc.steps
    delay = injected(sc, rng, steps)
    arrive = rng.normal(sc.compute_us, sc.jitter_us, size=(steps, sc.ranks)) + delay
    transfer = sc.transfer_us * rng.uniform(0.95, 1.05, size=(steps, 1))
    end = arrive.max(axis=1, keepdims=True) + transfer
    exec_us = np.rint(end - arrive)
    start = t0 + np.cumsum(np.concatenate([[0.0], end[:-1, 0]])).astype(np.int64)
    dump_lag = rng.uniform(0, 1000, size=(steps, sc.ranks))  # the dump thread's interval
    ts = (start[:, None] + end + dump_lag).astype(np.int64)
    rank = np.broadcast_to(np.arange(sc.ranks, dtype=np.uint32), (steps, sc.ranks))
    seq = np.broadcast_to(np.arange(steps, dtype=np.uint64)[:, None] // 2, (steps, sc.ranks))
    kind = np.broadcast_to((np.arange(steps) % 2)[:, None], (steps, sc.ranks))
    return {
        "ts_us": ts.ravel(),
        "node": (rank // sc.ranks_per_node).ravel(),
        "pod": (rank // sc.ranks_per_node).ravel(),
        "pid": (1000 + rank).ravel(),
        "comm_id": np.zeros(steps * sc.ranks, dtype=np.uint8),
        "collective": kind.ravel().astype(np.uint8),
        "msg_size_bytes": np.asarray(SIZES, dtype=np.uint64)[kind.ravel()],
        "seq": seq.ravel(),
        "rank": rank.ravel(),
        "n_ranks": np.full(steps * sc.ranks, sc.ranks, dtype=np.uint32),
        "exec_time_us": exec_us.ravel(),
        "injected_us": delay.ravel(),
    }


def names(sc: Scenario) -> dict[str, list[str]]:
    """The strings behind the code columns."""
    nodes = range((sc.ranks + sc.ranks_per_node - 1) // sc.ranks_per_node)
    return {
        "node": [f"node-{n}" for n in nodes],
        "pod": [f"w-{n}" for n in nodes],
        "comm_id": ["0x7f8c496ae9f661"],
        "collective": list(COLLECTIVES),
    }


def to_arrow(sc: Scenario, cols: dict[str, np.ndarray]):
    """A pyarrow table of the records (dictionary-encoded strings, `ts` in microseconds)."""
    import pyarrow as pa

    strings = names(sc)

    def column(name: str, values: np.ndarray):
        if name in strings:
            codes = pa.array(values.astype(np.int32))
            return pa.DictionaryArray.from_arrays(codes, pa.array(strings[name]))
        if name == "ts_us":
            return pa.array(values, pa.timestamp("us", tz="UTC"))
        return pa.array(values)

    return pa.table({("ts" if k == "ts_us" else k): column(k, cols[k]) for k in COLUMNS})


def to_pandas(sc: Scenario, cols: dict[str, np.ndarray]):
    """A pandas frame of the records (categorical strings, `ts_us` integer microseconds)."""
    import pandas as pd

    strings = names(sc)
    frame = {}
    for name in COLUMNS:
        values = cols[name]
        if name in strings:
            frame[name] = pd.Categorical.from_codes(values.astype(np.int32), strings[name])
        else:
            frame[name] = values
    return pd.DataFrame(frame)


def insert_chdb(session, sc: Scenario, cols: dict[str, np.ndarray], folder, team: str,
                run: str) -> int:  # fmt: skip
    """Insert the records into `platform.nccl_collectives` of a chDB session (through a
    Parquet file in `folder`); the number of rows."""
    from pathlib import Path

    import pyarrow.parquet as pq

    path = Path(folder) / f"{team}-{run}.parquet"
    pq.write_table(to_arrow(sc, cols), path, compression="none")
    names_ = ", ".join(("ts" if k == "ts_us" else k) for k in COLUMNS)
    session.query(
        f"INSERT INTO platform.nccl_collectives (team, run, {names_}) "
        f"SELECT {{team:String}}, {{run:String}}, {names_} FROM file('{path}', Parquet)",
        params={"team": team, "run": run},
    )
    path.unlink()
    return len(cols["ts_us"])
