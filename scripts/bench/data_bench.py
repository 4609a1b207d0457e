"""Benchmark the data pipeline against torch.utils.data.DataLoader, measured in the same run.

    python scripts/bench/data_bench.py                            # all figures
    python scripts/bench/data_bench.py --objects 200000 --rounds 3  # quicker

Both sides always get the same number of worker processes, counting every process of the
pipeline: DataLoader(num_workers=W) against (W - C) producers + C collators. The training
process itself is not counted on either side; on both it computes the sampling schedule
(DataLoader's sampler, the pipeline's feeder) and hands indices to the workers.

1. Throughput, CPU-bound, twice: small images with a heavy transform (3×S×S, `--cost`
   rounds of float maths in `__getitem__`) and large decoded images with a light one
   (3×L×L, `--large-cost` rounds), the same dataset, batch size and shuffling on both
   sides. Each run is one epoch
   of which the steady state is timed (`--warmup` batches at each end are not). The loaders
   take turns going first for `--rounds` rounds; printed: every round, the medians, and the
   ratio within each round with their median and spread. A third loader runs beside
   them: DataLoader whose workers get the pipeline's allocator settings (driver.data.heap)
   through worker_init_fn ("DL+heap"), so the output separates what the settings give from
   what the design gives. Also printed: CPU time per sample summed over the trainer and all
   its worker processes, which other jobs on a shared host disturb much less than
   wall-clock time, and the floor under it: the CPU time of `__getitem__` alone in a forked
   process, with glibc's default allocator settings and with the pipeline's. With every core
   busy, no loader can beat another by more than the ratio of their CPU per sample.
2. Throughput, read-latency-bound: the same images, plus `--latency-ms` of waiting per sample
   (a ranged read from object storage); the pipeline overlaps reads with `fetch_threads`.
3. Memory: a list of `--objects` Python tuples as the dataset; growth of the summed PSS of
   the trainer and all its worker processes from the first batch to the end of the epoch,
   each loader in a fresh interpreter. Ratio: pipeline ÷ DataLoader (goal ≤ 0.5).
Goal for the throughput ratios: pipeline ÷ DataLoader ≥ 1.5.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore", message="This DataLoader will create")


def _tree(root: int) -> list[int]:
    """`root` and all its descendant process ids."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def pss_kib(root: int) -> int:
    """Summed PSS (KiB) of `root` and all its descendants."""
    total = 0
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total


def cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of `root` and its descendants, live or reaped."""
    ticks = 0
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except OSError:
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


class Images:
    """Sample i: a seeded 3×S×S image, normalised with `cost` rounds; optional read latency."""

    def __init__(self, count: int, side: int, cost: int, latency_s: float = 0.0):
        self.count, self.side, self.cost, self.latency_s = count, side, cost, latency_s

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        if self.latency_s:
            time.sleep(self.latency_s)
        rng = np.random.default_rng(index)
        x = rng.integers(0, 255, (3, self.side, self.side), dtype=np.uint8).astype(np.float32)
        for _ in range(self.cost):
            x = np.sqrt(x * 0.5 + 1.0)
        return {"image": x, "label": index % 1000}


def split(workers: int, collators: int) -> int:
    """Producers when the pipeline may use `workers` processes in all (with the collators)."""
    return workers - collators


def _heap_init(_worker_id: int) -> None:
    from driver.data.heap import keep_freed_memory

    keep_freed_memory()


def make_dataloader(dataset, batch: int, workers: int, heap: bool = False):
    """DataLoader as users get it; `heap`: its workers take the pipeline's allocator settings
    (driver.data.heap) through worker_init_fn, to show what the settings alone give."""
    import torch.utils.data as tud

    return tud.DataLoader(
        dataset, batch_size=batch, shuffle=True, num_workers=workers, prefetch_factor=2,
        drop_last=True, worker_init_fn=_heap_init if heap else None,
    )  # fmt: skip


def make_pipeline(dataset, batch: int, workers: int, args: argparse.Namespace, threads: int):
    from driver.data import DataPipeline, PipelineConfig

    sample = dataset[0]["image"]
    cfg = PipelineConfig(
        batch_size=batch, producers=split(workers, args.collators), collators=args.collators,
        task_size=args.task, fetch_threads=threads, seed=1,
        slot_bytes=batch * sample.nbytes + (1 << 20),
    )  # fmt: skip
    return DataPipeline(dataset, cfg)


def timed_epoch(loader, warmup: int, batches: int) -> tuple[float, float]:
    """(samples/s, CPU ms per sample) in the steady state of one epoch of `batches` batches:
    `warmup` batches at each end (start-up, tail) are consumed but not timed."""
    count, start, cpu0, stop, cpu1 = 0, 0.0, 0.0, 0.0, 0.0
    for i, batch in enumerate(loader):
        float(batch["image"][0, 0, 0, 0])
        if i == warmup - 1:
            start, cpu0 = time.perf_counter(), cpu_seconds(os.getpid())
        elif warmup <= i < batches - warmup:
            count += len(batch["label"])
            if i == batches - warmup - 1:
                stop, cpu1 = time.perf_counter(), cpu_seconds(os.getpid())
    return count / (stop - start), 1000 * (cpu1 - cpu0) / count


def floor_ms(dataset, heap: bool, count: int = 300) -> float:
    """CPU ms per sample of the dataset's own `__getitem__` (no loader), in a forked child;
    `heap`: with the pipeline workers' allocator settings (driver.data.heap)."""
    import multiprocessing as mp

    def child(conn) -> None:
        if heap:
            _heap_init(0)
        dataset[0]
        start = time.process_time()
        for index in range(count):
            dataset[index]
        conn.send(1000 * (time.process_time() - start) / count)

    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child, args=(send,))
    proc.start()
    value = receive.recv()
    proc.join()
    return value


def throughput(args: argparse.Namespace, title: str, dataset, threads: int) -> None:
    """The loaders take turns going first for `--rounds` rounds; compare the medians, and the
    median of the per-round ratios (each round's runs follow one another, under similar
    load)."""
    w, batches = args.workers, len(dataset) // args.batch
    kinds = ["DataLoader", "DL+heap", "pipeline"]
    runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    for r in range(args.rounds):
        for kind in kinds[r % 3 :] + kinds[: r % 3]:  # each goes first in turn
            if kind == "pipeline":
                with make_pipeline(dataset, args.batch, w, args, threads) as data:
                    runs[kind].append(timed_epoch(data, args.warmup, batches))
            else:
                loader = make_dataloader(dataset, args.batch, w, heap=kind == "DL+heap")
                runs[kind].append(timed_epoch(loader, args.warmup, batches))
    p, c = split(w, args.collators), args.collators
    procs = {
        "DataLoader": f"{w} workers",
        "DL+heap": f"{w} workers, pipeline's heap",
        "pipeline": f"{p} producers + {c} collator{'s' * (c > 1)}",
    }
    print(f"\n{title}")
    med = {}
    for kind, values in runs.items():
        rates = [v[0] for v in values]
        med[kind] = float(np.median(rates)), float(np.median([v[1] for v in values]))
        print(
            f"  {kind:10s} {procs[kind]:30s} median {med[kind][0]:7.0f} samples/s "
            f"(rounds: {', '.join(f'{x:.0f}' for x in rates)})  CPU {med[kind][1]:.3f} ms/sample"
        )
    if not dataset.latency_s:
        plain, kept = floor_ms(dataset, heap=False), floor_ms(dataset, heap=True)
        print(
            f"  floor: __getitem__ alone {plain:.3f} ms/sample ({kept:.3f} with the pipeline's "
            f"heap settings); above it DataLoader +{med['DataLoader'][1] - plain:.3f}, "
            f"pipeline +{med['pipeline'][1] - kept:.3f} ms/sample"
        )
    for peer, what in (("DataLoader", "DataLoader"), ("DL+heap", "DataLoader (same heap)")):
        paired = [a[0] / b[0] for a, b in zip(runs["pipeline"], runs[peer], strict=True)]
        print(
            f"  ratio pipeline ÷ {what}, {w} worker processes each: samples/s "
            f"{med['pipeline'][0] / med[peer][0]:.2f} (medians); per round "
            f"{', '.join(f'{x:.2f}' for x in paired)}, median {np.median(paired):.2f}, "
            f"min {min(paired):.2f}, max {max(paired):.2f}; "
            f"CPU per sample {med['pipeline'][1] / med[peer][1]:.2f}"
        )


def memory_run(kind: str, objects: int, batch: int, workers: int, collators: int) -> dict:
    """One epoch over a list of Python tuples; PSS growth from the first batch to the end."""
    records = [(i, f"record-{i:09d}") for i in range(objects)]
    if kind == "dataloader":
        import torch.utils.data as tud

        loader = tud.DataLoader(
            records, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True
        )
    else:
        from driver.data import DataPipeline, PipelineConfig

        cfg = PipelineConfig(
            batch_size=batch, producers=split(workers, collators), collators=collators,
            task_size=64,
        )  # fmt: skip
        loader = DataPipeline(records, cfg)
    iterator = iter(loader)
    total = objects // batch
    next(iterator)
    time.sleep(0.5)
    start = pss_kib(os.getpid())
    for _ in range(total - 1):  # measure with the workers still alive, at the last batch
        next(iterator)
    end = pss_kib(os.getpid())
    seen = total + sum(1 for _ in iterator)
    if kind != "dataloader":
        loader.close()
    return {"start_kib": start, "end_kib": end, "growth_kib": end - start, "batches": seen}


def memory(args: argparse.Namespace) -> None:
    print(f"\nmemory: one epoch over a list of {args.objects} tuples (int, str), "
          f"{args.workers} worker processes each")  # fmt: skip
    results = {}
    for kind in ("dataloader", "pipeline"):
        cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", kind,
               "--objects", str(args.objects), "--mem-batch", str(args.mem_batch),
               "--workers", str(args.workers), "--collators", str(args.collators)]  # fmt: skip
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        results[kind] = r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"  {kind:10s} PSS of all processes {r['start_kib'] / 1024:7.1f} → "
            f"{r['end_kib'] / 1024:7.1f} MiB, growth {r['growth_kib'] / 1024:7.1f} MiB "
            f"over {r['batches']} batches"
        )
    dl, ours = results["dataloader"]["growth_kib"], results["pipeline"]["growth_kib"]
    print(f"  ratio pipeline ÷ DataLoader PSS growth: {ours / dl if dl > 0 else float('nan'):.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--samples", type=int, default=6144, help="images per epoch")
    add("--side", type=int, default=64, help="image side in pixels")
    add("--cost", type=int, default=6, help="transform rounds per image")
    add("--large-side", type=int, default=224, help="image side, large-image case")
    add("--large-cost", type=int, default=1, help="transform rounds, large-image case")
    add("--large-samples", type=int, default=3072, help="images per epoch, large-image case")
    add("--latency-ms", type=float, default=5.0, help="read latency per sample (case 2)")
    add("--latency-samples", type=int, default=2048, help="images per epoch (case 2)")
    add("--fetch-threads", type=int, default=8, help="pipeline fetch threads (case 2)")
    add("--batch", type=int, default=64)
    add("--workers", type=int, default=4, help="worker processes of each loader")
    add("--collators", type=int, default=1, help="pipeline collators (out of --workers)")
    add("--task", type=int, default=8, help="pipeline samples per task")
    add("--warmup", type=int, default=8, help="batches not timed at the start of each run")
    add("--rounds", type=int, default=7, help="interleaved rounds (median)")
    add("--objects", type=int, default=1_000_000, help="memory: list length")
    add("--mem-batch", type=int, default=512)
    add("--skip", choices=["cpu", "large", "latency", "memory"], action="append", default=[])
    add("--memory-child", choices=["dataloader", "pipeline"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.collators < 1 or split(args.workers, args.collators) < 1:
        parser.error(f"--workers {args.workers} must leave a producer beside "
                     f"--collators {args.collators} (≥ 1)")  # fmt: skip
    for name in ("samples", "large_samples", "latency_samples"):
        if getattr(args, name) < (2 * args.warmup + 2) * args.batch:
            parser.error(f"--{name.replace('_', '-')} must give 2 × --warmup + 2 batches or more")
    if args.memory_child:
        out = memory_run(
            args.memory_child, args.objects, args.mem_batch, args.workers, args.collators
        )
        print(json.dumps(out))
        return
    load = os.getloadavg()
    print(f"host: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / "
          f"{load[2]:.1f} (1/5/15 min) at start")  # fmt: skip
    if "cpu" not in args.skip:
        images = Images(args.samples, args.side, args.cost)
        throughput(args, f"throughput, CPU-bound ({args.samples} images/epoch, "
                   f"cost {args.cost}, batch {args.batch}):", images, threads=1)  # fmt: skip
    if "large" not in args.skip:
        images = Images(args.large_samples, args.large_side, args.large_cost)
        side = args.large_side
        throughput(args, f"throughput, CPU-bound, large images ({args.large_samples} images "
                   f"3×{side}×{side} float32/epoch, cost {args.large_cost}, batch {args.batch}):",
                   images, threads=1)  # fmt: skip
    if "latency" not in args.skip:
        images = Images(args.latency_samples, args.side, args.cost, args.latency_ms / 1000)
        title = (f"throughput, read-latency-bound ({args.latency_ms:g} ms per sample read, "
                 f"pipeline fetch_threads={args.fetch_threads}):")  # fmt: skip
        throughput(args, title, images, threads=args.fetch_threads)
    if "memory" not in args.skip:
        memory(args)
    load = os.getloadavg()
    print(f"\nload average at end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    main()
