"""Per-rank bodies for the multi-process checkpoint tests (spawned by torch.multiprocessing).

Each rank runs the toy model under FSDP2 (`fully_shard`) on gloo/CPU; rank 0 saves the full
parameters at the end to `<out>/<tag>.pt` for the test to compare.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from driver.checkpoint import Checkpointer
from tests.checkpoint.toy import config, full_params, init_dist, make_state, train
from tests.support.gloo_exit import exit_now

LAST_STEP = 8


def run_rank(rank: int, world_size: int, port: int, root: str, out: str, tag: str, resume: str):
    """Train to LAST_STEP, checkpointing every 3 steps; resume from `resume` first if set."""
    torch.use_deterministic_algorithms(True)
    init_dist(rank, world_size, port)
    try:
        state = make_state(rank, world_size, fsdp=True)
        ckpt = Checkpointer(config(root, keep_last=0), "team", tag, rank, world_size)
        first = 1
        if resume:
            first = ckpt.load(state, resume).step + 1
        train(state, ckpt, first, LAST_STEP)
        ckpt.close()
        params = full_params(state.model)  # collective: every rank takes part
        if rank == 0:
            torch.save({"params": params, "position": state.dataloader.position}, f"{out}/{tag}.pt")
    finally:
        dist.barrier()
        dist.destroy_process_group()
    exit_now()  # done: no finalization (tests/support/gloo_exit.py)


def preempt_rank(rank: int, world_size: int, port: int, root: str, out: str, tag: str, resume: str):
    """Only rank 1 gets SIGTERM after step 4; every rank must stop at the same step after a
    final save: step 4 when the ranks agree after every step (tag `preempt`), a later one
    when they agree about every 0.1 s of 50 ms steps (tag `paced`)."""
    import os
    import signal
    import time

    from driver.checkpoint import PreemptionGuard
    from tests.checkpoint.toy import train_step

    init_dist(rank, world_size, port)
    try:
        state = make_state(rank, world_size, fsdp=True)
        paced = tag == "paced"
        settings = config(root, interval_steps=100, preemption_check_s=0.1 if paced else 0.0)
        ckpt = Checkpointer(settings, "team", tag, rank, world_size)
        guard = PreemptionGuard(ckpt).install()
        stopped = None
        for step in range(1, LAST_STEP + 1):
            train_step(state, ckpt)
            if paced:
                time.sleep(0.05)
            if step == 4 and rank == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            if guard.on_step_end(step, state):
                stopped = step
                break
        guard.uninstall()
        ckpt.close()
        torch.save({"stopped": stopped, "latest": ckpt.latest()}, f"{out}/{tag}-{rank}.pt")
    finally:
        dist.barrier()
        dist.destroy_process_group()
    exit_now()  # done: no finalization (tests/support/gloo_exit.py)


def ddp_rank(rank: int, world_size: int, port: int, root: str, out: str, tag: str, resume: str):
    """`run_rank` under DDP with dropout: every rank is a replica, so only rank 0 (replica 0)
    snapshots the model and optimizer; each rank still saves its own RNG and loader."""
    from torch.nn.parallel import DistributedDataParallel

    torch.use_deterministic_algorithms(True)
    init_dist(rank, world_size, port)
    try:
        state = make_state(rank, world_size, dropout=0.3)
        state.model = DistributedDataParallel(state.model)
        settings = config(root, keep_last=0)
        ckpt = Checkpointer(settings, "team", tag, rank, world_size, dp_replica=rank)
        first = ckpt.load(state, resume).step + 1 if resume else 1
        train(state, ckpt, first, LAST_STEP)
        ckpt.close()
        if rank == 0:
            params = full_params(state.model.module)
            torch.save({"params": params, "position": state.dataloader.position}, f"{out}/{tag}.pt")
    finally:
        dist.barrier()
        dist.destroy_process_group()
    exit_now()  # done: no finalization (tests/support/gloo_exit.py)


def gloo_loops() -> int:
    """The gloo transport loop threads of this process (one per gloo group)."""
    import os
    from pathlib import Path

    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
        except OSError:
            continue
    return names.count("gloo_tcp_loop")


def groups_rank(rank: int, world_size: int, port: int, root: str, out: str, tag: str, resume: str):
    """Count gloo loop threads after init, after a Checkpointer and PreemptionGuard, after
    one and two saves, and after asking for the training thread's group again. Tag "nccl":
    the default group is taken for a non-gloo one from the start (a gloo companion)."""
    from driver.checkpoint import PreemptionGuard, groups

    init_dist(rank, world_size, port)
    try:
        if tag == "nccl":
            groups.default_is_gloo = lambda: False
        counts = {"init": gloo_loops()}
        state = make_state(rank, world_size)
        ckpt = Checkpointer(config(root, keep_last=0), "team", tag, rank, world_size)
        guard = PreemptionGuard(ckpt)
        counts["built"] = gloo_loops()
        for step in (1, 2):
            ckpt.save(step, state)
            ckpt.wait()
            counts[f"save{step}"] = gloo_loops()
        guard.on_step_end(2, state)
        counts["same"] = groups.training_cpu_group() is ckpt._group is guard._group
        counts["again"] = gloo_loops()
        ckpt.close()
        torch.save(counts, f"{out}/{tag}-{rank}.pt")
    finally:
        dist.barrier()
        dist.destroy_process_group()
    exit_now()  # done: no finalization (tests/support/gloo_exit.py)
