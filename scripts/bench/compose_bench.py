"""The composed run on the 2x2 shape against its peers, measured in one run.

    .venv/bin/python scripts/bench/compose_bench.py [--rounds 2] [--steps 60] [--skip 20]
        [--only steps,start]

1. **steps**: steady-state steps/s of the fully composed run (ft on with replica groups of
   2 workers and FSDP 2 inside, the DiT's encoder and evaluator with weight refresh, the
   shared-memory pipeline with 2 producers) ÷ the same run with ft, services and pipeline
   off (plain FSDP 2 on the same 2 training workers, in-process batches), both on one Ray
   cluster of 2 nodes x 2 stand-in GPUs started here (driver.embedded.cluster), the driver
   joined to it; alternating which goes first. Goal ≥ 0.85. Printed with it: where the CPU
   time goes in each, per kind of process (/proc, the cluster's whole session, over the
   steady-state window).
2. **start**: time to the first step of `runner run --local RUN --shape 2x2`'s command
   (`python -m driver.embedded.cluster ...`: the cluster started, the driver joined, the
   workers up, the first step done) ÷ a plain torch.distributed start of the same 4 workers
   (torch.multiprocessing + init_process_group("gloo"), the same model and batch:
   scripts/bench/driver_overhead.py's plain side). Goal ≤ 2.5.

Every figure is a ratio against its peer measured in the same run; the machine's load moves
both alike. Exit 0 (figures are reported, not asserted).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from driver_overhead import steady_rate  # noqa: E402

CONFIG = "runs/train/tiny-dit.yaml"
SHAPE = ["shape.nodes=2", "shape.gpus_per_node=2", "shape.accelerator=cpu", "shape.cpus_per_gpu=1"]
COMPOSED = ["ft=on", "aux=encode_eval", "data.loader=pipeline", "data.producers=2",
            "parallelism.fsdp_size=2", "parallelism.replica_group_size=2"]  # fmt: skip
PLAIN = ["ft=off", "aux=none", "data.loader=inprocess", "parallelism.fsdp_size=2",
         "parallelism.workers=2"]  # fmt: skip
"""The composed run's services take 2 of the 4 slots, so it trains on 2 workers (one group
of FSDP 2); its peer trains on the same 2 workers (and global batch), its 2 other slots
idle, so the ratio is the cost of ft, services and pipeline, not of a different world."""
KINDS = (("RayTrainWorker", "training worker"), ("AuxWorker", "aux worker"),
         ("AuxProxy", "aux proxy"), ("FleetMonitor", "fleet monitor"),
         ("TrainController", "Ray Train controller"), ("raylet", "raylet"),
         ("gcs_server", "gcs"), ("dashboard", "dashboard"), ("driver.train", "driver"),
         ("runtime_env", "runtime env agent"), ("Lighthouse", "lighthouse"))  # fmt: skip


def kind_of(cmdline: str) -> str:
    for mark, kind in KINDS:
        if mark in cmdline:
            return kind
    return "other"


def cpu_by_pid() -> dict[int, tuple[str, float]]:
    """{pid: (kind, CPU seconds so far)} of every process of this machine (`KINDS`)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(pid)] = (kind_of(cmd), (int(fields[11]) + int(fields[12])) / tick)
    return out


class CpuWatch:
    """CPU seconds by kind of process used while it watches: processes sampled every
    0.5 s (one that ends keeps its last sample), less what each had used before."""

    def __init__(self):
        import threading

        self.before, self.seen = cpu_by_pid(), {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            self.seen.update(cpu_by_pid())

    def done(self) -> Counter:
        self.stop.set()
        self.thread.join()
        self.seen.update(cpu_by_pid())
        out: Counter = Counter()
        for pid, (kind, cpu) in self.seen.items():
            out[kind] += cpu - self.before.get(pid, (kind, 0.0))[1]
        return out


def run_driver(address: str, overrides: list[str], steps: int, out: Path) -> list[float]:
    """One run joined to the cluster; the end time of each step."""
    env = {**os.environ, "RAY_ADDRESS": address}
    cmd = [sys.executable, "-m", "driver.train", CONFIG, f"train.steps={steps}",
           f"run.output_dir={out}", f"run.name={out.name}", "logging.format=json",
           "logging.store=false", "optimizer.warmup_steps=2", *SHAPE, *overrides]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"run failed ({done.returncode}): {done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["time"] for row in rows]


def steps_figure(args) -> None:
    from driver.checkpoint.auth import KEY_ENV, load_secret
    from driver.embedded.cluster import start, stop

    os.environ.setdefault(KEY_ENV, load_secret().decode())
    cluster = start(2, 2, 1.0)
    folder = Path(tempfile.mkdtemp(prefix="compose-bench-"))
    ratios = []
    try:
        for index in range(args.rounds):
            rates, cpus = {}, {}
            order = ("composed", "plain") if index % 2 == 0 else ("plain", "composed")
            for side in order:
                watch = CpuWatch()
                overrides = COMPOSED if side == "composed" else PLAIN
                out = folder / f"{side}-{index}"
                ends = run_driver(cluster.address, overrides, args.steps, out)
                rates[side] = steady_rate(ends, args.skip)
                cpus[side] = watch.done()
            ratios.append(rates["composed"] / rates["plain"])
            print(
                f"round {index + 1}: composed {rates['composed']:.2f} steps/s, plain "
                f"{rates['plain']:.2f} steps/s, ratio {ratios[-1]:.3f}",
                flush=True,
            )
            for side in ("composed", "plain"):
                where = ", ".join(f"{k} {v:.1f}" for k, v in cpus[side].most_common(8))
                print(f"  {side} CPU s by process (whole run): {where}", flush=True)
    finally:
        stop(cluster)
    print(
        f"steps/s composed ÷ plain on 2x2: {statistics.median(ratios):.3f} "
        f"(rounds {', '.join(f'{r:.3f}' for r in ratios)}; goal >= 0.85)"
    )


def first_step_s(cmd: list[str], metrics: Path, env: dict) -> float:
    """Seconds from launching `cmd` to the end of the first step in `metrics`."""
    launched = time.time()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{cmd[:4]} failed ({done.returncode}): {done.stderr[-2000:]}")
    first = json.loads(metrics.read_text().splitlines()[0])["time"]
    return first - launched


def start_figure(args) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    folder = Path(tempfile.mkdtemp(prefix="compose-start-"))
    ratios = []
    for index in range(args.rounds):
        out = folder / f"shape-{index}"
        shape = [sys.executable, "-m", "driver.embedded.cluster", CONFIG, "train.steps=3",
                 f"run.output_dir={out}", f"run.name=start{index}", "logging.format=json",
                 *SHAPE, "aux=none"]  # fmt: skip
        shaped = first_step_s(shape, out / "metrics.jsonl", env)
        plain_out = folder / f"plain-{index}.jsonl"
        plain = [sys.executable, str(HERE / "driver_overhead.py"), "--plain", str(plain_out),
                 "--workers", "4", "--config", CONFIG, "train.steps=3", "aux=none"]  # fmt: skip
        plain_s = first_step_s(plain, plain_out, env)
        ratios.append(shaped / plain_s)
        print(
            f"round {index + 1}: 2x2 shape {shaped:.1f} s, plain torch.distributed "
            f"{plain_s:.1f} s to the first step, ratio {ratios[-1]:.2f}",
            flush=True,
        )
    print(
        f"time to the first step, 2x2 shape ÷ plain: {statistics.median(ratios):.2f} (goal <= 2.5)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--skip", type=int, default=20)
    parser.add_argument("--only", default="steps,start", help="figures: steps, start")
    args = parser.parse_args(argv)
    wanted = set(args.only.split(","))
    if "steps" in wanted:
        steps_figure(args)
    if "start" in wanted:
        start_figure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
