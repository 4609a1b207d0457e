"""Straggler analysis benchmark: the SQL in chDB against the pandas reference, same records.

    .venv/bin/python scripts/bench/straggler_bench.py [--records 10000000] [--ranks 10000]
                                                      [--repeat 2]

Generates `--records` NCCL collective records from `--ranks` ranks (8 per node, one world
communicator, one rank 1.3x slower; observability/synthetic.py, numpy, columnar), loads
them into chDB's `platform.nccl_collectives` and into a pandas frame, then times the
analysis (per-rank and per-node arrival skew per 30 s window: observability/sql/
straggler_ranks.sql and straggler_nodes.sql, and observability/reference.py). Loading is not
timed; each side runs `--repeat` times, alternating, and its best time counts (the machine
may be shared). Prints both absolute times and the ratio chDB / pandas [goal <= 0.2], and
checks that both name the injected rank.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from observability import reference, stragglers  # noqa: E402
from observability.synthetic import Scenario, Slow, generate, insert_chdb, to_pandas  # noqa: E402

GOAL = 0.2
TEAM, RUN = "bench", "straggler-bench"


def scenario(records: int, ranks: int) -> tuple[Scenario, int]:
    """The scenario and its number of steps (records = steps x ranks)."""
    if records < ranks * 2:
        raise SystemExit(f"error: --records {records} must be at least 2 x --ranks {ranks}")
    slow = (Slow((ranks // 3,), 1.3),)
    return Scenario(ranks=ranks, ranks_per_node=8, slow=slow), records // ranks


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def best(sides: dict, repeat: int) -> dict:
    """{name: (best seconds, last result)} running the sides alternately `repeat` times."""
    times = {name: [] for name in sides}
    results = {}
    for _ in range(repeat):
        for name, fn in sides.items():
            seconds, results[name] = timed(fn)
            times[name].append(seconds)
    return {name: (min(times[name]), results[name]) for name in sides}


def named(rows) -> set[int]:
    return {int(r["rank"]) for r in rows if r["straggler"]}


def run(records: int, ranks: int, repeat: int = 2, say=print) -> dict:
    from chdb import session as chdb_session

    from kustomize.tooling import clickhouse

    sc, steps = scenario(records, ranks)
    cols = generate(sc, seed=1, steps=steps)
    n = len(cols["ts_us"])
    say(f"{n:,} records from {ranks:,} ranks ({steps} collectives each)")
    session = chdb_session.Session()
    clickhouse.apply(session)
    with tempfile.TemporaryDirectory() as folder:
        insert_chdb(session, sc, cols, folder, TEAM, RUN)
    frame = to_pandas(sc, cols)
    del cols
    gc.collect()
    span = (0, 4_000_000_000)

    def sql():
        return [stragglers.run_chdb(session, q, TEAM, RUN, *span)
                for q in ("straggler_ranks", "straggler_nodes")]  # fmt: skip

    def pandas():
        return reference.straggler_ranks(frame), reference.straggler_nodes(frame)

    out = best({"chdb": sql, "pandas": pandas}, repeat)
    (chdb_s, (sql_ranks, _)), (pandas_s, (pd_ranks, _)) = out["chdb"], out["pandas"]
    session.query(f"DELETE FROM platform.nccl_collectives WHERE run = '{RUN}'")
    want = set(sc.slow[0].ranks)
    found = (named(sql_ranks), named(pd_ranks.to_dict("records")))
    ratio = chdb_s / pandas_s
    say(f"chDB   (SQL)        {chdb_s:8.2f} s  ({len(sql_ranks):,} rank-window rows)")
    say(f"pandas (reference)  {pandas_s:8.2f} s")
    verdict = "ok" if ratio <= GOAL else "MISSED"
    say(f"ratio chDB / pandas {ratio:8.3f}  [goal <= {GOAL}]  {verdict}")
    say(f"named: chDB {sorted(found[0])}, pandas {sorted(found[1])}, injected {sorted(want)}")
    return {"records": n, "chdb_s": chdb_s, "pandas_s": pandas_s, "ratio": ratio,
            "named": found, "injected": want}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--ranks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    result = run(args.records, args.ranks, args.repeat)
    return 0 if result["named"] == (result["injected"],) * 2 else 1


if __name__ == "__main__":
    sys.exit(main())
