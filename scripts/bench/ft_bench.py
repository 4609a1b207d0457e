"""Fault-tolerance benchmark: live recovery with torchft against restarting from the newest
checkpoint, on real processes (one per replica group), same model, data and failures.

    .venv/bin/python scripts/bench/ft_bench.py [--groups 3] [--steps 150] [--interval 100]
    .venv/bin/python scripts/bench/ft_bench.py --platform [--groups 3] [--steps 150] ...
    .venv/bin/python scripts/bench/ft_bench.py --platform --groups 2 --group-size 2

Four runs of tests.support.ft_drill (goals in brackets):
  ft-clean   torchft, no failure
  ddp-clean  plain gloo data parallelism, no torchft, no failure
  ft-fail    torchft, constant global batch; a group is SIGKILLed inside the allreduce of
             the first step from each of --kills whose quorum has every group, and a fresh
             process for it starts at once and heals from a live peer (as Ray Train
             replaces a failed worker)
  restart    no torchft, checkpoints every --interval steps; a kill at each step where one
             struck in ft-fail fails the whole group of processes, which restarts and
             resumes from the newest checkpoint
Printed ratios:
  effective throughput (committed samples per wall second, from launch to the last step)
      ft-fail / restart                                                         [>= 2.3]
  time from a kill to the first step committed without the lost group          [<= 1 s]
  final loss ft-fail / ft-clean (constant batch)                         [within 1%]
  steps/s ft-clean / ddp-clean (between the first and last commit)              [>= 0.9]
  and where ft's per-step cost goes (quorum, gradient allreduce, commit vote).

--platform measures the first figure instead through the platform's own path: two
`python -m driver.train` runs of the tiny LM (`ft=on` against Ray Train's worker-group
restart from the newest checkpoint), a Ray Train worker SIGKILLed at each of --kills
(scripts/bench/ft_platform.py). It prints the ratio from the first committed step (the
figure: the launch is the same for both and amortised over a real run) and from launch.
With `--group-size N` every replica group is N workers sharding the model (FSDP N inside,
torchft across) and two failure-free runs are added: steps/s ft on ÷ off [>= 0.9], and the
bytes the cross-group reduce copied per step ÷ the gradient's bytes [<= 0.05].
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests.support.ft_harness import Drill, DrillResult  # noqa: E402

FT = {
    "heartbeat_timeout_ms": 300,
    "heartbeat_interval_ms": 50,
    "join_timeout_ms": 300,
    "quorum_tick_ms": 20,
    "timeout_s": 20,
    "quorum_timeout_s": 60,
}


DRILL_KILLS = "30,80,130"
PLATFORM_KILLS = "30,75,120"
"""The platform run sees a step in metrics.jsonl up to about 3 s after it commits (rows go
in 1 s batches, the driver writes every 2 s): a kill needs that much training after it to
strike, and an idle machine runs the 20 steps after step 130 in 2.5 s."""


def steps_per_s(rows: list[dict]) -> float:
    """Steady-state steps per second between the first and the last commit."""
    return (len(rows) - 1) / (rows[-1]["time"] - rows[0]["time"])


def group_rows(result: DrillResult) -> list[dict]:
    """One row per committed step (the first process that committed it)."""
    best: dict[int, dict] = {}
    for rows in result.rows.values():
        for row in rows:
            if row["step"] not in best or row["time"] < best[row["step"]]["time"]:
                best[row["step"]] = row
    return [best[s] for s in sorted(best)]


def recovery_times(result: DrillResult, groups: int) -> list[float]:
    """Per kill: seconds from the SIGKILL to the first commit by a quorum without the lost
    group. Kills strike whole quorums, and a replacement needs far longer than this to
    start, so that is the first commit by fewer than `groups` groups. (The step in flight
    may still commit with every group when the victim's share of the allreduce got out.)"""
    rows = group_rows(result)
    out = []
    for killed in sorted(result.killed_at.values()):
        after = [r["time"] for r in rows if r["time"] > killed and r["live"] < groups]
        if after:
            out.append(after[0] - killed)
    return out


def restart_run(folder: Path, groups: int, steps: int, kills: list[int], spec: dict) -> float:
    """Wall seconds of the checkpoint-restart baseline, from the first launch to the last
    committed step: one launch per segment."""
    started = time.time()
    for n, kill in enumerate([*kills, None]):
        plan = {n % groups: (kill, "during")} if kill is not None else {}
        resumed = {**spec, "resume": n > 0}
        result = Drill(folder / f"seg{n}", groups, steps, plan, {}, resumed, mode="ddp").run()
        done = group_rows(result)
        if kill is None and (not done or done[-1]["step"] != steps):
            raise SystemExit(f"restart baseline did not finish: {result.stderr}")
    return done[-1]["time"] - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--interval", type=int, default=100, help="checkpoint interval, steps")
    parser.add_argument(
        "--kills",
        default=None,
        help=f"steps at which a group dies ({DRILL_KILLS}; --platform {PLATFORM_KILLS})",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        default=1,
        help="--platform: workers per replica group, FSDP inside (e.g. 2: --groups x 2 workers)",
    )
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--compute-ms", type=float, default=50.0, help="per micro-batch")
    parser.add_argument(
        "--platform", action="store_true", help="python -m driver.train runs (Ray Train)"
    )
    args = parser.parse_args(argv)
    default = PLATFORM_KILLS if args.platform else DRILL_KILLS
    kills = [int(k) for k in (args.kills or default).split(",") if k]
    g, steps = args.groups, args.steps
    if args.platform:
        return platform(g, steps, kills, args.interval, args.group_size)
    spec = {
        "grad_accum": args.accum,
        "micro_batch": 16,
        "dim": 64,
        "hidden": 256,
        "step_sleep_s": args.compute_ms / 1000,
        "ft": {**FT, "min_replicas": 1},  # replacements may take longer than the gap between kills
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clean = Drill(root / "ft-clean", g, steps, spec=spec).run()
        ddp = Drill(root / "ddp-clean", g, steps, spec=spec, mode="ddp").run()
        plan = {i % g: (k, "during") for i, k in enumerate(kills)}
        rejoin = {i % g: k + 1 for i, k in enumerate(kills)}
        failing = {**spec, "kill_when_full": True}
        fail = Drill(root / "ft-fail", g, steps, plan, rejoin, failing, hold=False).run()
        struck = sorted(fail.killed_step.values())  # the same failures, where they struck
        ckpt = {**spec, "ckpt_root": str(root / "ckpt"), "ckpt_interval": args.interval}
        restart_s = restart_run(root / "restart", g, steps, struck, ckpt)
    report(args, clean, ddp, fail, restart_s)
    return 0


def platform(groups: int, steps: int, kills: list[int], interval: int, size: int = 1) -> int:
    import ft_platform

    with tempfile.TemporaryDirectory() as tmp:
        result = ft_platform.measure(Path(tmp), groups * size, steps, kills, interval, size)
    ft_platform.report(result, groups * size, steps, kills, interval)
    return 0


def report(args, clean: DrillResult, ddp: DrillResult, fail: DrillResult, restart_s: float):
    g, steps = args.groups, args.steps
    rows_clean, rows_ddp, rows_fail = group_rows(clean), group_rows(ddp), group_rows(fail)
    if rows_fail[-1]["step"] != steps or rows_clean[-1]["step"] != steps:
        raise SystemExit(f"an ft run did not finish: {fail.stderr}")
    fail_s = rows_fail[-1]["time"] - fail.started  # launch to the last committed step
    rec = recovery_times(fail, g)
    on, off = steps_per_s(rows_clean), steps_per_s(rows_ddp)
    last = rows_clean[-1]
    per_step = {k: 1000 * last[f"ft_{k}_s"] / steps for k in ("quorum", "reduce", "commit")}
    print(
        f"ft bench: {g} replica groups x {args.accum} micro-batches, {steps} steps, kills from "
        f"{args.kills} struck at {','.join(map(str, sorted(fail.killed_step.values())))} (both "
        f"runs), checkpoint every {args.interval} steps"
    )
    print(
        f"  effective throughput ft-fail / restart  {restart_s / fail_s:6.2f}  [>= 2.3]"
        f"  (wall {fail_s:.1f} s vs {restart_s:.1f} s for the same committed samples)"
    )
    print(
        f"  kill -> first commit without the group  {max(rec) if rec else float('nan'):6.2f} s"
        f"  [<= 1 s]  (each: {', '.join(f'{r:.2f}' for r in rec)})"
    )
    print(
        f"  final loss ft-fail / ft-clean           {rows_fail[-1]['loss'] / last['loss']:8.4f}"
        f"  [within 1%]"
    )
    print(
        f"  steps/s ft-clean / ddp-clean            {on / off:6.2f}  [>= 0.9]"
        f"  ({on:.1f} vs {off:.1f} steps/s)"
    )
    step_ms = 1000 / on
    print(
        f"  ft per step: {step_ms:.1f} ms, of which quorum {per_step['quorum']:.1f} ms, "
        f"allreduce {per_step['reduce']:.1f} ms, commit vote {per_step['commit']:.1f} ms; "
        f"ddp step {1000 / off:.1f} ms"
    )
    degraded = sum(1 for r in rows_fail if r["live"] < g)
    print(
        f"  kills survived {len(fail.killed_at)} (all {steps} steps committed), "
        f"steps committed with fewer groups {degraded}"
    )


if __name__ == "__main__":
    sys.exit(main())
