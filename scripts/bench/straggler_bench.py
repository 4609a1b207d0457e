"""Straggler analysis benchmark: the SQL in chDB against the pandas reference, same records.

    .venv/bin/python scripts/bench/straggler_bench.py [--records 10000000] [--ranks 10000]
                                                      [--repeat 3] [--threads 1]

Generates `--records` NCCL collective records from `--ranks` ranks (8 per node, one world
communicator, one rank 1.3x slower; observability/synthetic.py, numpy, columnar), loads
them into chDB and into a pandas frame, then times the analysis (per-rank and per-node
arrival skew per 30 s window: observability/sql/straggler_ranks.sql and straggler_nodes.sql,
and observability/reference.py); each side returns its rows as a pandas DataFrame.

The goal compares like with like, both sides holding the records in memory: the SQL runs on
a Memory-engine table with the columns of `platform.nccl_collectives` (its DDL from the
schema, engine swapped; the materialized keys computed on insert). The same SQL on the
platform's MergeTree table (compressed parts, as a server or a run's store holds them) is
timed too and printed with its own ratio. chDB runs one thread (`--threads`, its
max_threads; 0 lets chDB choose, two on this machine): one core against pandas' one, and on
a shared two-core machine also chDB's fastest (two threads wait on each other whenever the
other processes take a core, and spend more CPU merging). Loading is not timed; the sides
run `--repeat` times, alternating, and each one's best time counts (the machine may be
shared: `uptime` is printed before and after). Prints the absolute times, chDB / pandas
[goal <= 0.2] and checks that every side names the injected rank.
"""

from __future__ import annotations

import argparse
import gc
import os
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
TABLE = "platform.nccl_collectives"
MEMORY = "straggler_bench.nccl_collectives"
QUERIES = ("straggler_ranks", "straggler_nodes")


def scenario(records: int, ranks: int) -> tuple[Scenario, int]:
    """The scenario and its number of steps (records = steps x ranks)."""
    if records < ranks * 2:
        raise SystemExit(f"error: --records {records} must be at least 2 x --ranks {ranks}")
    slow = (Slow((ranks // 3,), 1.3),)
    return Scenario(ranks=ranks, ranks_per_node=8, slow=slow), records // ranks


def memory_ddl(schema_sql: str) -> str:
    """CREATE TABLE for MEMORY: the schema's nccl_collectives columns, engine Memory."""
    from observability import clickhouse

    head = f"CREATE TABLE IF NOT EXISTS {TABLE}"
    (ddl,) = [s for s in clickhouse.statements(schema_sql) if s.startswith(head)]
    columns = ddl[len(head) : ddl.index("ENGINE")].strip()
    return f"CREATE TABLE {MEMORY}\n{columns}\nENGINE = Memory"


def on_table(name: str, table: str) -> str:
    """Query `name`'s text reading `table` instead of the platform's."""
    text = stragglers.sql(name)
    if text.count(TABLE) != 1:
        raise ValueError(f"{name}.sql must read {TABLE} exactly once")
    return text.replace(TABLE, table)


def frames(session, table: str, span, threads: int) -> list:
    """The two queries' rows (DataFrames) on `table`, as stragglers.frame_chdb reads them,
    chDB running `threads` threads (max_threads)."""
    out = []
    for name in QUERIES:
        values = stragglers.used(name, stragglers.params(TEAM, RUN, *span))
        text = f"{on_table(name, table)}\nSETTINGS max_threads = {int(threads)}"
        out.append(session.query(text, "DataFrame", params=values))
    return out


def timed(fn):
    """(wall seconds, CPU seconds of this process: every chDB thread counts, result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def best(sides: dict, repeat: int) -> dict:
    """{name: (best wall s, best CPU s, last result)}: the sides run alternately `repeat`
    times. CPU time is the steadier figure on a shared machine (it leaves out the time the
    process waited for a core); wall time is what a user waits."""
    walls, cpus = {name: [] for name in sides}, {name: [] for name in sides}
    results = {}
    for _ in range(repeat):
        for name, fn in sides.items():
            wall, cpu, results[name] = timed(fn)
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {name: (min(walls[name]), min(cpus[name]), results[name]) for name in sides}


def named(ranks) -> set[int]:
    return {int(r) for r in ranks.loc[ranks["straggler"].astype(bool), "rank"]}


def load(session, sc: Scenario, cols) -> None:
    """The records into the platform's table (this run's rows) and the Memory table."""
    from observability import clickhouse

    clickhouse.apply(session)
    with tempfile.TemporaryDirectory() as folder:
        insert_chdb(session, sc, cols, folder, TEAM, RUN)
    session.query("CREATE DATABASE IF NOT EXISTS straggler_bench")
    session.query(f"DROP TABLE IF EXISTS {MEMORY}")
    session.query(memory_ddl(clickhouse.SCHEMA.read_text()))
    session.query(f"INSERT INTO {MEMORY} SELECT * FROM {TABLE} WHERE run = '{RUN}'")


def uptime() -> str:
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def run(records: int, ranks: int, repeat: int = 3, say=print, threads: int = 1) -> dict:
    from chdb import session as chdb_session

    sc, steps = scenario(records, ranks)
    cols = generate(sc, seed=1, steps=steps)
    n = len(cols["ts_us"])
    say(f"{n:,} records from {ranks:,} ranks ({steps} collectives each)")
    session = chdb_session.Session()
    load(session, sc, cols)
    frame = to_pandas(sc, cols)
    del cols
    gc.collect()
    span = (0, 4_000_000_000)
    sides = {
        "memory": lambda: frames(session, MEMORY, span, threads),
        "mergetree": lambda: frames(session, TABLE, span, threads),
        "pandas": lambda: [reference.straggler_ranks(frame), reference.straggler_nodes(frame)],
    }
    say(f"before: {uptime()}")
    out = best(sides, repeat)
    say(f"after:  {uptime()}  (best of {repeat}, sides alternating; chDB max_threads {threads})")
    session.query(f"DROP TABLE IF EXISTS {MEMORY}")
    session.query(f"DELETE FROM {TABLE} WHERE run = '{RUN}'")
    (pandas_s, pandas_cpu, _) = out["pandas"]
    ratio = {side: out[side][0] / pandas_s for side in ("memory", "mergetree")}
    rows = len(out["memory"][2][0])
    for side, label in (("memory", "chDB, Memory table   "), ("mergetree", "chDB, MergeTree table"),
                        ("pandas", "pandas (reference)   ")):  # fmt: skip
        wall, cpu, _ = out[side]
        say(f"{label}  {wall:8.2f} s  (CPU {cpu:6.2f} s)")
    verdict = "ok" if ratio["memory"] <= GOAL else "MISSED"
    say(f"ratio chDB / pandas {ratio['memory']:8.3f}  [goal <= {GOAL}]  {verdict}"
        f"  (both in memory; CPU time ratio {out['memory'][1] / pandas_cpu:.3f})")  # fmt: skip
    say(f"ratio chDB MergeTree / pandas {ratio['mergetree']:8.3f}"
        f"  (CPU time ratio {out['mergetree'][1] / pandas_cpu:.3f})")  # fmt: skip
    found = {side: named(result[0]) for side, (_, _, result) in out.items()}
    want = set(sc.slow[0].ranks)
    say("named: " + ", ".join(f"{k} {sorted(v)}" for k, v in found.items())
        + f"; injected {sorted(want)}; {rows:,} rank-window rows")  # fmt: skip
    return {"records": n, "chdb_s": out["memory"][0], "mergetree_s": out["mergetree"][0],
            "pandas_s": pandas_s, "ratio": ratio["memory"], "ratio_mergetree": ratio["mergetree"],
            "named": tuple(found.values()), "injected": want}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--ranks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="chDB's max_threads (1: one core, as pandas; 0: chDB's own choice)",
    )
    args = parser.parse_args(argv)
    if args.threads < 0:
        raise SystemExit(f"error: --threads {args.threads} must be 0 or more")
    result = run(args.records, args.ranks, args.repeat, threads=args.threads)
    return 0 if result["named"] == (result["injected"],) * 3 else 1


if __name__ == "__main__":
    sys.exit(main())
