"""Driver overhead: steady-state steps/s of the Ray-driven loop ÷ a plain torch.distributed
(gloo) loop with the same model, batch and number of workers, measured in the same run.

    .venv/bin/python scripts/bench/driver_overhead.py [--steps 80] [--skip 20] [--repeats 2]

The driver run is `driver.train.main` on an embedded Ray (its per-step rows come from
metrics.jsonl); the peer is torch.multiprocessing + init_process_group("gloo") + DDP +
AdamW running the same workload with one thread per worker. Steady state skips the first
`--skip` steps; runs alternate and the best of `--repeats` counts, since other load on the
machine comes and goes. Start-up (launch to the end of the first step) is printed apart.
Goal: ratio >= 0.95.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def steady_rate(times: list[float], skip: int) -> float:
    """Steps per second between the end of step `skip` and the end of the last step."""
    span = times[-1] - times[skip]
    return (len(times) - 1 - skip) / span


def plain_worker(rank: int, world: int, port: int, config: str, overrides: list, result) -> None:
    """One rank of the plain loop; rank 0 puts (start-up s, step end times) on `result`."""
    started = time.time()
    os.environ["OMP_NUM_THREADS"] = "1"  # what Ray gives a 1-CPU worker
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from driver import optim
    from driver.batches import LocalBatchSource
    from driver.config import compose
    from driver.workloads import build

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)  # fmt: skip
    cfg, _ = compose(config, overrides)
    torch.manual_seed(cfg.train.seed)
    work = build(cfg.model, cfg.data)
    model = DistributedDataParallel(work.model)
    opt, sched = optim.build(model, cfg.optimizer, cfg.train.steps)
    batches = iter(LocalBatchSource(work.dataset, cfg.train.micro_batch_size, rank, world, 0))
    ends = []
    for _ in range(cfg.train.steps):
        loss = work.loss(model, next(batches))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        loss.item()
        ends.append(time.time())
    if rank == 0:
        result.put((ends[0] - started, ends))
    dist.destroy_process_group()


def run_plain(config: str, overrides: list, workers: int) -> tuple[float, list[float]]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    launched = time.time()
    procs = [
        ctx.Process(target=plain_worker, args=(r, workers, port, config, overrides, result))
        for r in range(workers)
    ]
    for proc in procs:
        proc.start()
    _, ends = result.get(timeout=600)
    for proc in procs:
        proc.join()
    return ends[0] - launched, ends


def run_driver(config: str, overrides: list, workers: int) -> tuple[float, list[float]]:
    from driver.train import main

    out = Path(tempfile.mkdtemp(prefix="driver-bench-"))
    args = [config, *overrides, f"parallelism.workers={workers}", f"run.output_dir={out}"]
    launched = time.time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main([*args, "logging.format=json", "run.name=bench"])
    import ray

    ray.shutdown()  # an idle Ray (raylet, dashboard) must not slow the plain loop down
    if code:
        raise SystemExit(f"driver run failed with exit code {code}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    ends = [row["time"] for row in rows]
    return ends[0] - launched, ends


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "runs/train/tiny-lm.yaml"))
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--skip", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each")
    parser.add_argument("overrides", nargs="*", help="driver config overrides for both loops")
    args = parser.parse_args(argv)
    overrides = [f"train.steps={args.steps}", "optimizer.warmup_steps=5", *args.overrides]
    driver, plain = [], []
    for _ in range(args.repeats):  # alternate, and keep the best of each: load comes and goes
        start, ends = run_driver(args.config, overrides, args.workers)
        driver.append((steady_rate(ends, args.skip), start))
        start, ends = run_plain(args.config, overrides, args.workers)
        plain.append((steady_rate(ends, args.skip), start))
    driver_rate, plain_rate = max(r for r, _ in driver), max(r for r, _ in plain)
    driver_start, plain_start = driver[0][1], plain[0][1]  # cold: includes starting Ray
    print(f"workers {args.workers}, steps {args.steps} (steady state after {args.skip}), "
          f"best of {args.repeats}")  # fmt: skip
    print(f"driver (Ray Train) : {driver_rate:7.2f} steps/s   cold start-up {driver_start:6.1f} s")
    print(f"plain gloo loop    : {plain_rate:7.2f} steps/s   cold start-up {plain_start:6.1f} s")
    print(f"ratio driver/plain : {driver_rate / plain_rate:7.3f}   (goal >= 0.95)")
    print("all runs (steps/s): driver " + ", ".join(f"{r:.2f}" for r, _ in driver)
          + "; plain " + ", ".join(f"{r:.2f}" for r, _ in plain))  # fmt: skip


if __name__ == "__main__":
    main()
