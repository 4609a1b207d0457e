"""Checkpoint benchmark: async staged saves against a synchronous dcp.save, same run.

    .venv/bin/python scripts/bench/checkpoint_bench.py [--mb 200] [--device cpu|cuda]

Prints two ratios per async flavour (`staged`: save returns once the snapshot is in host
memory; `overlap`: the snapshot overlaps the next forward/backward), goals in brackets:
  blocked ratio  = time the loop is blocked by Checkpointer.save (async, staged in host
                   memory) / time of a synchronous dcp.save of the same state   [<= 0.10]
  step ratio     = step time while a background write runs / clean step time  [<= 1.15]
The state is an MLP with AdamW (parameters + two moments), about --mb megabytes. Every
save, the synchronous one too, follows a training step, as saves do in the loop.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

from driver.checkpoint import CheckpointConfig, Checkpointer, TrainState

WIDTH = 2048


def build(megabytes: int, device: str) -> TrainState:
    """An MLP whose parameters + AdamW moments take about `megabytes` of fp32."""
    layers = max(1, round(megabytes * 1e6 / 4 / 3 / (WIDTH * WIDTH + WIDTH)))
    torch.manual_seed(0)
    blocks = [
        torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()) for _ in range(layers)
    ]
    model = torch.nn.Sequential(*blocks).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return TrainState(model, optimizer)


def step(state: TrainState, batch: torch.Tensor, ckpt: Checkpointer | None = None) -> float:
    started = time.perf_counter()
    state.model(batch).square().mean().backward()
    if ckpt is not None:
        ckpt.staged()  # overlap_staging: the snapshot must be complete before the update
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    if batch.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - started


def state_bytes(state: TrainState) -> int:
    model_sd, optim_sd = get_state_dict(state.model, state.optimizer)
    tensors = list(model_sd.values())
    tensors += [v for s in optim_sd["state"].values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def sync_save_s(state: TrainState, batch, directory: str) -> float:
    step(state, batch)  # a save follows a training step, as in the loop
    model_sd, optim_sd = get_state_dict(state.model, state.optimizer)
    started = time.perf_counter()
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=directory, no_dist=True)
    elapsed = time.perf_counter() - started
    shutil.rmtree(directory)
    return elapsed


def async_round(ckpt: Checkpointer, step_no: int, state, batch, max_steps: int) -> tuple:
    """One async save: (blocked s, step times during the write, clean step times after)."""
    step(state, batch)  # a save follows a training step, as in the loop
    ckpt.save(step_no, state)
    blocked, busy = None, []
    while (blocked is None or ckpt.writing) and len(busy) < max_steps:
        writing = ckpt.writing
        elapsed = step(state, batch, ckpt)
        if blocked is None:  # save() plus any wait for the snapshot within the next step
            blocked = ckpt.counters["last_blocked_s"]
        if writing:
            busy.append(elapsed)
    ckpt.wait()
    clean = [step(state, batch) for _ in range(max(2, len(busy)))]
    return blocked, busy, clean


def run(state: TrainState, batch, directory: str, repeats: int, max_steps: int) -> dict:
    """Interleaved rounds (sync save, staged save, overlapped save), so that load changes
    on the host hit every flavour alike; round 0 warms up the staging buffers."""
    ckpts = {
        name: Checkpointer(
            CheckpointConfig(root=directory, keep_last=1, overlap_staging=overlap), "bench", name
        )
        for name, overlap in (("staged", False), ("overlap", True))
    }
    out = {name: {"blocked": [], "busy": [], "clean": []} for name in ckpts}
    sync = []
    try:
        for i in range(repeats + 1):
            seconds = sync_save_s(state, batch, f"{directory}/sync-{i}")
            for name, ckpt in ckpts.items():
                blocked, busy, clean = async_round(ckpt, i + 1, state, batch, max_steps)
                if i > 0:
                    out[name]["blocked"].append(blocked)
                    out[name]["busy"] += busy
                    out[name]["clean"] += clean
            if i > 0:
                sync.append(seconds)
    finally:
        for ckpt in ckpts.values():
            ckpt.close()
    return {"sync": statistics.median(sync), **out}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=150, help="state size in MB")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=6, help="steps timed per write")
    args = parser.parse_args(argv)

    state = build(args.mb, args.device)
    batch = torch.randn(args.batch, WIDTH, device=args.device)
    for _ in range(3):
        step(state, batch)
    directory = tempfile.mkdtemp(prefix="ckpt-bench-")
    try:
        result = run(state, batch, directory, args.repeats, args.max_steps)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    sync_s = result["sync"]
    size = state_bytes(state) / 1e6
    print(f"state {size:.0f} MB on {args.device}, {torch.get_num_threads()} torch threads")
    print(f"sync dcp.save {sync_s * 1e3:.1f} ms (median of {args.repeats})")
    for name in ("staged", "overlap"):
        blocked = statistics.median(result[name]["blocked"])
        busy = statistics.median(result[name]["busy"])
        clean = statistics.median(result[name]["clean"])
        print(
            f"{name:8s} blocked {blocked * 1e3:7.1f} ms, step during write {busy * 1e3:7.1f} ms,"
            f" clean step {clean * 1e3:7.1f} ms | blocked ratio {blocked / sync_s:.3f}"
            f" (goal <= 0.10), step ratio {busy / clean:.3f} (goal <= 1.15)"
        )


if __name__ == "__main__":
    main()
