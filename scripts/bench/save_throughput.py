"""Save throughput of a pod: what `catalog/save_throughput.yaml` holds for its device.

    .venv/bin/python scripts/bench/save_throughput.py [--mb 600] [--device cpu|cuda]
        [--root DIR_OR_GS_URI] [--repeats 3]

A final checkpoint is the Checkpointer's save of the whole training state, committed:
staging into host memory (async mode's blocking part) and the write to the checkpoint
root. This measures both, as the driver does them (`driver.checkpoint.Checkpointer`, async
mode, then `wait()`), for a state of about `--mb` MB (an MLP with AdamW), and prints

  staging GB/s   = state bytes / time Checkpointer.save blocked (the copy to host memory)
  write GB/s     = state bytes / time from save() to the committed marker
  ratio          = write GB/s / the same bytes written with plain file writes and one
                   fsync (the storage's own pace, the peer in the same run)

and the YAML row for the catalog. On a GPU node: `--device cuda --root gs://<checkpoint
bucket>/bench` (the run's real path). The grace period of every run is derived from it
(catalog.saving, docs/runner.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from driver.checkpoint import CheckpointConfig, Checkpointer  # noqa: E402
from scripts.bench.checkpoint_bench import build, state_bytes  # noqa: E402


def plain_write_s(size: int, directory: str) -> float:
    """The peer: `size` bytes in 64 MiB writes to one file, fsync, close."""
    block = os.urandom(1 << 20) * 64
    path = os.path.join(directory, "plain.bin")
    started = time.perf_counter()
    with open(path, "wb") as handle:
        left = size
        while left > 0:
            left -= handle.write(block[: min(left, len(block))])
        handle.flush()
        os.fsync(handle.fileno())
    elapsed = time.perf_counter() - started
    os.remove(path)
    return elapsed


def measure(state, root: str, repeats: int) -> tuple[list[float], list[float]]:
    """(blocked s, committed s) of `repeats` saves after one warm-up."""
    cfg = CheckpointConfig(root=root, keep_last=1, interval_steps=1)
    ckpt = Checkpointer(cfg, "bench", f"save-{os.getpid()}", secret=b"bench-key")
    blocked, committed = [], []
    try:
        for step in range(repeats + 1):
            started = time.perf_counter()
            ckpt.save(step + 1, state)
            held = ckpt.counters["last_blocked_s"]
            assert ckpt.wait(), ckpt.last_error
            if step:
                blocked.append(held)
                committed.append(time.perf_counter() - started)
    finally:
        ckpt.close()
    return blocked, committed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=600, help="state size in MB")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--root", default=None, help="checkpoint root (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    state = build(args.mb, args.device)
    state.model(torch.randn(4, 2048, device=args.device)).sum().backward()
    state.optimizer.step()  # the AdamW moments exist, as in a run's checkpoint
    size = state_bytes(state)
    scratch = tempfile.mkdtemp(prefix="save-bench-")
    try:
        blocked, committed = measure(state, args.root or scratch, args.repeats)
        plain = [plain_write_s(size, scratch) for _ in range(args.repeats)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    staging = size / statistics.median(blocked) / 1e9
    write = size / statistics.median(committed) / 1e9
    peer = size / statistics.median(plain) / 1e9
    print(f"state {size / 1e6:.0f} MB on {args.device}, root {args.root or 'a local temp dir'}, "
          f"{args.repeats} saves")  # fmt: skip
    print(f"  staging {staging:.2f} GB/s  (blocked {statistics.median(blocked) * 1e3:.0f} ms)")
    print(f"  write {write:.2f} GB/s  (save to commit {statistics.median(committed):.2f} s)")
    print(f"  vs plain writes + fsync of the same bytes {peer:.2f} GB/s: ratio {write / peer:.2f}")
    print(f"catalog row: {{staging_gb_s: {staging:.2f}, write_gb_s: {write:.2f}}}")


if __name__ == "__main__":
    main()
