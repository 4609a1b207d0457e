"""Driver overhead: steady-state steps/s of the Ray-driven loop ÷ a plain torch.distributed
(gloo) loop with the same model, batch, steps and number of workers, measured in one run.

    .venv/bin/python scripts/bench/driver_overhead.py [--steps 80] [--skip 20] [--rounds 2]
        [--workers 2] [--config runs/train/tiny-lm.yaml] [key=value ...]

The defaults take about a minute and a half on an idle 2-core machine; `--workers 2,1
--steps 300 --skip 50 --rounds 3` is the longer measurement.

Each side is its own process tree, started from here, one at a time, alternating which goes
first in each round so that load drifting on the machine hits both alike:
- driver: `python -m driver.train CONFIG ...` on an embedded Ray (Ray Train workers, the run's
  channel, progress thread); its per-step times come from metrics.jsonl.
- plain: torch.multiprocessing workers + init_process_group("gloo") + DDP + AdamW with the
  same composed config, batch feed (driver.data.feed.Feed), accumulation and clipping.
Fairness: both use the same composed config and the same batch feed; the script reads each
training worker's OMP_NUM_THREADS, CPU affinity and niceness from /proc (`worker_probe`),
prints them and refuses a ratio when they differ. Both get one
intra-op thread per `parallelism.cpus_per_worker` (the driver's loop calls
torch.set_num_threads; Ray sets OMP_NUM_THREADS; the plain workers get both before torch
starts). Neither side pins CPUs. Ray runs its workers at niceness 15 (RAY_worker_niceness),
so the plain workers renice themselves to match: on a shared machine, a worker at niceness 0
and one at 15 do not get the same share of the CPUs. Ray's daemons, the driver process and
its progress thread are the driver's overhead and count against it.
Steady state skips the first `--skip` steps. The ratio is the median of the rounds' ratios.
Start-up (process launch to the end of the first step) is printed with its ratio
driver/plain (goal <= 2) and, per round, the driver's phases: the composed config printed
(Python, imports, Hydra), Ray up and the plan made, the training workers requested, the
first step done. Goal: steady-state ratio >= 0.95.
Each `--workers` count is measured in turn: by default 2 workers, which fill this 2-core
machine (Ray's own processes then take CPU time from training); `--workers 2,1` adds 1
worker, which leaves a core to them, as a GPU node's many cores do for its one worker per
GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WORKER_MARKS = (b"RayTrainWorker", b"multiprocessing.spawn")
"""A training worker's command line: Ray Train's worker actor, or a plain side's rank."""


def worker_probe(pid: int) -> dict | None:
    """The conditions a training worker runs under, from /proc: OMP_NUM_THREADS, the CPUs
    it may run on, its niceness (None: not a training worker, or gone)."""
    try:
        if not any(mark in Path(f"/proc/{pid}/cmdline").read_bytes() for mark in WORKER_MARKS):
            return None
        env = dict(
            item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if b"=" in item
        )  # fmt: skip
        stat = Path(f"/proc/{pid}/stat").read_text()
        nice = int(stat[stat.rindex(")") + 2 :].split()[16])
        cpus = len(os.sched_getaffinity(pid))
    except (OSError, ValueError):
        return None
    omp = env.get(b"OMP_NUM_THREADS")
    return {"pid": pid, "omp": omp.decode() if omp else None, "cpus": cpus, "nice": nice}


def steady_rate(times: list[float], skip: int) -> float:
    """Steps per second between the end of step `skip` and the end of the last step."""
    if len(times) < skip + 2:
        raise ValueError(f"{len(times)} steps are too few to skip {skip}")
    return (len(times) - 1 - skip) / (times[-1] - times[skip])


def conditions(probes: list[dict]) -> set[tuple]:
    """The distinct (OMP_NUM_THREADS, CPUs, niceness) the workers ran under (both sides set
    torch's threads to `parallelism.cpus_per_worker`)."""
    return {(p["omp"], p["cpus"], p["nice"]) for p in probes}


def ray_worker_niceness() -> int:
    """The niceness Ray gives its worker processes (RAY_worker_niceness, 15 by default)."""
    return int(os.environ.get("RAY_worker_niceness", "15"))


def plain_worker(rank: int, world: int, port: int, config: str, overrides: list, out: str):
    """One rank of the plain loop; rank 0 writes one {step, time, loss} row per step."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from driver import optim
    from driver.config.compose import compose
    from driver.data.feed import Feed
    from driver.workloads import build

    os.nice(ray_worker_niceness() - os.nice(0))  # as Ray's workers run
    cfg, _ = compose(config, overrides)
    torch.set_num_threads(max(1, int(cfg.parallelism.cpus_per_worker)))  # as the driver does
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)  # fmt: skip
    torch.manual_seed(cfg.train.seed)
    work = build(cfg.model, cfg.data)
    model = DistributedDataParallel(work.model) if world > 1 else work.model  # as the driver
    opt, sched = optim.build(model, cfg.optimizer, cfg.train.steps)
    accum, rows = cfg.train.grad_accum_steps, []
    feed = Feed(work.dataset, cfg.train.micro_batch_size, world * accum, cfg.train.seed,
                rank=rank, grad_accum=accum)  # fmt: skip
    for step in range(cfg.train.steps):
        total = 0.0
        for micro in range(accum):
            with model.no_sync() if micro < accum - 1 and world > 1 else _nothing():
                loss = work.loss(model, feed.batch(step, rank * accum + micro)) / accum
                loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.max_grad_norm or 1e9)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        rows.append({"step": step + 1, "time": time.time(), "loss": total})
    if rank == 0:
        Path(out).write_text("".join(json.dumps(row) + "\n" for row in rows))
    dist.destroy_process_group()


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def plain_main(out: str, workers: int, config: str, overrides: list[str]) -> None:
    """`--plain`: spawn the plain workers (OMP_NUM_THREADS set before torch starts)."""
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.start_processes(plain_worker, args=(workers, port, config, overrides, out),
                       nprocs=workers, start_method="spawn")  # fmt: skip


def run_side(side: str, args, overrides: list[str]) -> dict:
    """Run one side to the end in its own session: its steady rate, start-up and CPU cost."""
    out = Path(tempfile.mkdtemp(prefix=f"driver-bench-{side}-"))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), env.get("PYTHONPATH", "")])
    env.pop("RAY_ADDRESS", None)
    every = list(overrides)
    if side == "driver":
        cmd = [sys.executable, "-m", "driver.train", args.config, *every,
               f"run.output_dir={out}", "run.name=bench", "logging.format=json"]  # fmt: skip
        metrics = out / "metrics.jsonl"
    else:
        metrics = out / "plain.jsonl"
        cmd = [sys.executable, __file__, "--plain", str(metrics), "--workers",
               str(args.workers), "--config", args.config, *every]  # fmt: skip
    launched = time.time()
    with open(out / "log.txt", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        seen: dict[str, float] = {}  # start-up phase -> when its line appeared
        reader = threading.Thread(target=copy_lines, args=(proc.stdout, log, seen), daemon=True)
        reader.start()
        samples = []  # (time, CPU seconds used so far by every process of the run's tree)
        probes: dict[int, dict] = {}  # the training workers' conditions, by pid
        while proc.poll() is None:
            members, cpu = tree_cpu(proc.pid)
            samples.append((time.time(), cpu))
            for pid in members - probes.keys():
                if found := worker_probe(pid):
                    probes[pid] = found
            time.sleep(0.25)
        reader.join(timeout=10)
    settle(proc.pid)
    if proc.returncode:
        raise SystemExit(f"{side} run failed ({proc.returncode}); see {out / 'log.txt'}")
    ends = [json.loads(line)["time"] for line in metrics.read_text().splitlines()]
    phases = {name: at - launched for name, at in seen.items()}
    return {
        "rate": steady_rate(ends, args.skip),
        "start": ends[0] - launched,
        "cpu": cpu_per_step(samples, ends, args.skip),
        "phases": {**phases, "first step": ends[0] - launched},
        "probes": list(probes.values()),
    }


PHASES = {"config": "config", "ray up": "capacity:", "workers asked": "training workers ("}
"""Start-up phases of the driver: the first line of each (the composed config is printed,
Ray is up and the plan made, the training workers are requested; then the first step)."""


def copy_lines(stream, log, seen: dict[str, float]) -> None:
    """Copy a run's output to its log, noting when each start-up phase's line appears."""
    for raw in stream:
        line = raw.decode(errors="replace")
        log.write(line)
        for name, marker in PHASES.items():
            if name not in seen and marker in line:
                seen[name] = time.time()


def tree_cpu(root: int) -> tuple[set[int], float]:
    """The live processes of a run (those of its session and every descendant of `root`: an
    embedded run's Ray has a session of its own) and their CPU seconds (user + system), from
    /proc."""
    stats = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                text = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            stats[int(pid)] = text[text.rindex(")") + 2 :].split()
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    members, todo = set(), [root]
    while todo:
        pid = todo.pop()
        members.add(pid)
        todo += children.get(pid, [])
    members |= {pid for pid, fields in stats.items() if int(fields[3]) == root}
    used = sum(int(stats[p][11]) + int(stats[p][12]) for p in members if p in stats)
    return members & stats.keys(), used / os.sysconf("SC_CLK_TCK")


def cpu_per_step(samples: list[tuple[float, float]], ends: list[float], skip: int) -> float:
    """CPU seconds the whole run used per steady-state step (samples interpolated)."""
    import numpy as np

    times, cpu = zip(*samples, strict=True)
    used = np.interp(ends[-1], times, cpu) - np.interp(ends[skip], times, cpu)
    return float(used) / (len(ends) - 1 - skip)


def settle(session: int, timeout_s: float = 60.0) -> None:
    """Wait until every process left over from a run's session has exited (an embedded
    run's own supervisor kills what its Ray leaves, driver/embedded/lean.py)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(
        _sid(int(pid)) == session for pid in os.listdir("/proc") if pid.isdigit()
    ):
        time.sleep(0.5)


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "runs/train/tiny-lm.yaml"))
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--skip", type=int, default=20)
    parser.add_argument("--workers", default="2", help="worker counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each")
    parser.add_argument("--plain", metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="driver config overrides for both loops")
    args = parser.parse_args(argv)
    if args.plain:
        return plain_main(args.plain, int(args.workers), args.config, args.overrides)
    from driver.config.compose import compose

    counts = [int(count) for count in args.workers.split(",")]
    for count in counts:
        args.workers = count
        overrides = [f"train.steps={args.steps}", "optimizer.warmup_steps=5",
                     f"parallelism.workers={count}", *args.overrides]  # fmt: skip
        cfg, _ = compose(args.config, overrides)
        args.threads = max(1, int(cfg.parallelism.cpus_per_worker))
        print(f"== {count} training workers on {os.cpu_count()} CPUs", flush=True)
        report(args, [measure_round(args, overrides, i) for i in range(args.rounds)])


def measure_round(args, overrides: list[str], index: int) -> dict:
    """One driver run and one plain run, in alternating order; rates, start-ups, probes."""
    order = ("driver", "plain") if index % 2 == 0 else ("plain", "driver")
    result: dict = {}
    for side in order:
        got = run_side(side, args, overrides)
        result[side] = got
        phases = ", ".join(f"{name} {at:.1f} s" for name, at in got["phases"].items())
        print(f"round {index + 1} {side:6s}: {got['rate']:6.2f} steps/s, "
              f"{got['cpu'] * 1000:6.1f} CPU ms/step, start-up {got['start']:5.1f} s "
              f"({phases}), load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    return result


def report(args, rounds: list[dict]) -> None:
    """Print the conditions, the rates, the start-ups and the ratio."""
    seen = {side: conditions([p for r in rounds for p in r[side]["probes"]]) for side in rounds[0]}
    for side, found in seen.items():
        described = ", ".join(
            f"OMP_NUM_THREADS={o}, {c} CPUs allowed, nice {n}" for o, c, n in sorted(found, key=str)
        )
        print(f"{side:6s} workers ran with {described}")
    if seen["driver"] != seen["plain"] or len(seen["driver"]) != 1:
        raise SystemExit("the two loops ran under different conditions: no fair ratio")
    med = {
        key: {s: statistics.median(r[s][key] for r in rounds) for s in ("driver", "plain")}
        for key in ("rate", "start", "cpu")
    }
    ratios = [r["driver"]["rate"] / r["plain"]["rate"] for r in rounds]
    cpu_ratios = [r["plain"]["cpu"] / r["driver"]["cpu"] for r in rounds]
    print(f"workers {args.workers}, steps {args.steps} (steady state after {args.skip}), "
          f"{args.rounds} rounds, medians")  # fmt: skip
    for side, name in (("driver", "driver (Ray Train)"), ("plain", "plain gloo loop   ")):
        print(f"{name} : {med['rate'][side]:7.2f} steps/s  {med['cpu'][side] * 1000:6.1f} "
              f"CPU ms/step  start-up {med['start'][side]:5.1f} s")  # fmt: skip
    print(f"ratio driver/plain : {statistics.median(ratios):7.3f} steps/s (goal >= 0.95; "
          "rounds: " + ", ".join(f"{x:.3f}" for x in ratios) + ")")  # fmt: skip
    print(f"CPU per step       : {statistics.median(cpu_ratios):7.3f} plain/driver (rounds: "
          + ", ".join(f"{x:.3f}" for x in cpu_ratios) + ")")  # fmt: skip
    phases = rounds[0]["driver"]["phases"]
    print("driver start-up     : " + ", ".join(
        f"{name} {statistics.median(r['driver']['phases'].get(name, 0.0) for r in rounds):.1f} s"
        for name in phases) + " (medians: when each phase ended, from launch)")  # fmt: skip
    starts = [r["driver"]["start"] / r["plain"]["start"] for r in rounds]
    print(f"start-up           : {statistics.median(starts):7.3f} driver/plain, launch to the end "
          "of the first step (goal <= 2; rounds: " + ", ".join(f"{x:.2f}" for x in starts)
          + f"); load average {os.getloadavg()[0]:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
