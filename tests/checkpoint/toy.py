"""A tiny deterministic training setup the checkpoint tests share (CPU, gloo).

Model, AdamW, a warm-up LR schedule, and a data loader whose progress is its state; a
global batch is split evenly across ranks, so any world size computes the same mean loss.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from driver.checkpoint import CheckpointConfig, Checkpointer, TrainState

GLOBAL_BATCH = 12  # divisible by 1, 2, 3 and 4 ranks
FEATURES = 16


class Loader:
    """Batch i of the global schedule depends only on (seed, i); progress is i."""

    def __init__(self, seed: int, rank: int = 0, world_size: int = 1):
        self.seed, self.rank, self.world_size, self.position = seed, rank, world_size, 0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.position)
        x = torch.randn(GLOBAL_BATCH, FEATURES, generator=gen)
        y = torch.randn(GLOBAL_BATCH, 4, generator=gen)
        self.position += 1
        per = GLOBAL_BATCH // self.world_size
        rows = slice(self.rank * per, (self.rank + 1) * per)
        return x[rows], y[rows]

    def state_dict(self) -> dict:
        return {"seed": self.seed, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.position = state["seed"], state["position"]


def make_model(dropout: float = 0.0, hidden: int = 32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, hidden),
        torch.nn.ReLU(),
        torch.nn.Dropout(dropout),
        torch.nn.Linear(hidden, 4),
    )


def make_state(
    rank: int = 0, world_size: int = 1, dropout: float = 0.0, fsdp: bool = False, hidden: int = 32
) -> TrainState:
    model = make_model(dropout, hidden)
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world_size,))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 5))
    torch.manual_seed(1234 + rank)
    return TrainState(model, optimizer, schedule, Loader(seed=7, rank=rank, world_size=world_size))


def train_step(state: TrainState, ckpt: Checkpointer | None = None) -> None:
    x, y = state.dataloader.next_batch()
    loss = torch.nn.functional.mse_loss(state.model(x), y)
    loss.backward()
    if ckpt is not None:
        ckpt.staged()  # overlap_staging: the snapshot must be complete before the update
    state.optimizer.step()
    state.lr_scheduler.step()
    state.optimizer.zero_grad()


def train(state: TrainState, ckpt: Checkpointer | None, first: int, last: int) -> None:
    """Steps first..last (inclusive), checkpointing when the interval says so."""
    for step in range(first, last + 1):
        train_step(state, ckpt)
        if ckpt is not None and ckpt.due(step):
            ckpt.save(step, state)


def full_params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Unsharded parameters (gathers DTensors)."""
    out = {}
    for name, value in model.state_dict().items():
        full = value.full_tensor() if hasattr(value, "full_tensor") else value
        out[name] = full.detach().clone()
    return out


def config(root: str, **overrides) -> CheckpointConfig:
    return CheckpointConfig(
        root=root, interval_steps=overrides.pop("interval_steps", 3), **overrides
    )


def init_dist(rank: int, world_size: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
