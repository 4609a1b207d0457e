"""Benchmark the data pipeline against torch.utils.data.DataLoader, measured in the same run.

    python scripts/bench/data_bench.py                 # both figures, default sizes
    python scripts/bench/data_bench.py --objects 200000 --samples 2000   # quicker

1. Throughput: the same dataset (synthetic images with a fixed numpy transform cost), the
   same batch size, `--workers` transform processes each (DataLoader workers vs producers;
   the pipeline adds one collator and the feeder, both printed). Ratio: samples/s of the
   pipeline ÷ DataLoader's (goal ≥ 1.5). A second row gives both the same total process
   count (producers = workers - 1, one collator).
2. Memory: a list of `--objects` Python tuples as the dataset; growth of the summed PSS of
   the trainer and all its worker processes from the first batch to the end of the epoch.
   Each loader runs in a fresh interpreter. Ratio: pipeline growth ÷ DataLoader growth
   (goal ≤ 0.5; DataLoader workers copy the pages whose reference counts they touch).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


class Images:
    """Sample i: a seeded 3×S×S uint8 image, normalised with `cost` rounds of float maths."""

    def __init__(self, count: int, side: int, cost: int):
        self.count, self.side, self.cost = count, side, cost

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        rng = np.random.default_rng(index)
        x = rng.integers(0, 255, (3, self.side, self.side), dtype=np.uint8).astype(np.float32)
        for _ in range(self.cost):
            x = np.sqrt(x * 0.5 + 1.0)
        return {"image": x, "label": index % 1000}


def run_dataloader(dataset, batch: int, workers: int, epochs: int) -> float:
    import torch.utils.data as tud

    loader = tud.DataLoader(
        dataset, batch_size=batch, shuffle=True, num_workers=workers,
        persistent_workers=True, prefetch_factor=2, drop_last=True,
    )  # fmt: skip
    return _timed(loader, epochs)


def run_pipeline(dataset, batch: int, producers: int, epochs: int, task: int) -> float:
    from driver.data import DataPipeline, PipelineConfig

    sample = dataset[0]["image"]
    cfg = PipelineConfig(
        batch_size=batch, producers=producers, collators=1, prefetch_batches=4,
        task_size=task, slot_bytes=batch * sample.nbytes + (1 << 20),
    )  # fmt: skip
    with DataPipeline(dataset, cfg) as data:
        return _timed(data, epochs)


def _timed(loader, epochs: int) -> float:
    """Samples/s over the epochs after a warm-up epoch (workers started, caches warm)."""
    for batch in loader:
        float(batch["image"][0, 0, 0, 0])
    count, start = 0, time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            float(batch["image"][0, 0, 0, 0])
            count += len(batch["label"])
    return count / (time.perf_counter() - start)


def pss_kib(root: int) -> int:
    """Summed PSS (KiB) of `root` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total


def memory_run(kind: str, objects: int, batch: int, workers: int) -> dict:
    """One epoch over a list of Python tuples; PSS growth from the first batch to the end."""
    records = [(i, f"record-{i:09d}") for i in range(objects)]
    if kind == "dataloader":
        import torch.utils.data as tud

        loader = tud.DataLoader(
            records, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True
        )
        iterator = iter(loader)
    else:
        from driver.data import DataPipeline, PipelineConfig

        cfg = PipelineConfig(batch_size=batch, producers=workers, collators=1, task_size=64)
        loader = DataPipeline(records, cfg)
        iterator = iter(loader)
    total = objects // batch  # both drop nothing but the tail batch is measured after
    next(iterator)
    time.sleep(0.5)
    start = pss_kib(os.getpid())
    for _ in range(total - 1):  # measure with the workers still alive, before the end
        next(iterator)
    end = pss_kib(os.getpid())
    seen = total + sum(1 for _ in iterator)
    if kind != "dataloader":
        loader.close()
    return {"start_kib": start, "end_kib": end, "growth_kib": end - start, "batches": seen}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4096, help="images per epoch")
    parser.add_argument("--side", type=int, default=64, help="image side in pixels")
    parser.add_argument("--cost", type=int, default=6, help="transform rounds per image")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="transform processes")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs after a warm-up")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--task", type=int, default=8, help="pipeline samples per task")
    parser.add_argument("--objects", type=int, default=1_000_000, help="memory: list length")
    parser.add_argument("--mem-batch", type=int, default=512)
    parser.add_argument("--skip", choices=["throughput", "memory"], action="append", default=[])
    parser.add_argument(
        "--memory-child", choices=["dataloader", "pipeline"], help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_run(args.memory_child, args.objects, args.mem_batch, args.workers)))
        return
    if "throughput" not in args.skip:
        throughput(args)
    if "memory" not in args.skip:
        memory(args)


def throughput(args: argparse.Namespace) -> None:
    """Interleave the loaders for `--rounds` rounds and compare medians (noisy hosts)."""
    ds, w = Images(args.samples, args.side, args.cost), args.workers
    runs: dict[str, list[float]] = {"dl": [], "same_workers": [], "same_procs": []}
    for _ in range(args.rounds):
        runs["dl"].append(run_dataloader(ds, args.batch, w, args.epochs))
        runs["same_workers"].append(run_pipeline(ds, args.batch, w, args.epochs, args.task))
        if w > 1:
            runs["same_procs"].append(run_pipeline(ds, args.batch, w - 1, args.epochs, args.task))
    med = {key: float(np.median(values)) for key, values in runs.items() if values}
    rows = [
        ("DataLoader", f"{w} workers", "dl"),
        ("pipeline", f"{w} producers + 1 collator", "same_workers"),
        ("pipeline", f"{w - 1} producers + 1 collator", "same_procs"),
    ]
    for name, procs, key in rows:
        if key in med:
            spread = ", ".join(f"{v:.0f}" for v in runs[key])
            print(f"throughput  {name:10s} {procs:26s} median {med[key]:8.0f} samples/s ({spread})")
    print(f"throughput ratio (pipeline {w} producers ÷ DataLoader {w} workers): "
          f"{med['same_workers'] / med['dl']:.2f}")  # fmt: skip
    if "same_procs" in med:
        print(f"throughput ratio (same total worker processes, {w}): "
              f"{med['same_procs'] / med['dl']:.2f}")  # fmt: skip


def memory(args: argparse.Namespace) -> None:
    results = {}
    for kind in ("dataloader", "pipeline"):
        cmd = [sys.executable, __file__, "--memory-child", kind, "--objects", str(args.objects),
               "--mem-batch", str(args.mem_batch), "--workers", str(args.workers)]  # fmt: skip
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        results[kind] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[kind]
        print(
            f"memory      {kind:10s} PSS {r['start_kib'] / 1024:8.1f} → "
            f"{r['end_kib'] / 1024:8.1f} MiB"
            f"  growth {r['growth_kib'] / 1024:8.1f} MiB over {r['batches']} batches"
        )
    dl, ours = results["dataloader"]["growth_kib"], results["pipeline"]["growth_kib"]
    ratio = ours / dl if dl > 0 else float("nan")
    print(f"memory growth ratio (pipeline ÷ DataLoader, {args.objects} objects): {ratio:.3f}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    main()
