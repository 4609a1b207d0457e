"""What a checkpoint holds, and how it maps to and from a DCP state dict.

A checkpoint's DCP state dict:
    model        model state dict (DTensor shards under FSDP2: each rank writes its own)
    optim        optimizer state, FQN-keyed by DCP's get_state_dict (reshardable)
    lr_scheduler scheduler.state_dict()
    dataloader   {"rank<r>": loader.state_dict() as JSON bytes}  per rank (opaque to DCP)
    extra        {name: obj.state_dict()}          other stateful objects
    rng          {"rank<r>": torch/cuda/numpy/python RNG states as JSON bytes}  per rank

Nothing here is a pickle (plain.py): a checkpoint's own entries cannot run code on load.
    step         the training step the state was taken after
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from driver.checkpoint.plain import decode_state, encode_state, restore_rng, rng_blob


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


@dataclass
class TrainState:
    """The training state of one rank, as the loop holds it."""

    model: torch.nn.Module
    """The (possibly FSDP2-sharded) model."""
    optimizer: torch.optim.Optimizer | None = None
    """Its optimizer; saved through DCP's get_state_dict so it reshards with the model."""
    lr_scheduler: Stateful | None = None
    """LR scheduler (anything with state_dict/load_state_dict)."""
    dataloader: Stateful | None = None
    """Data pipeline progress (e.g. driver.data's DataPipeline); saved per rank."""
    extra: dict[str, Stateful] = field(default_factory=dict)
    """Other stateful objects, the same on every rank (e.g. a loss scaler)."""
    step: int = 0
    """Set by `Checkpointer.load` to the step the checkpoint was taken after."""


def _model_and_optim(state: TrainState) -> tuple[dict, dict | None]:
    # DCP (torch.distributed.checkpoint) loads at the first save or load, not at start-up.
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if state.optimizer is None:
        return get_model_state_dict(state.model), None
    return get_state_dict(state.model, state.optimizer)


def save_dict(state: TrainState, step: int, rank: int, replica: bool = True) -> dict[str, Any]:
    """The DCP state dict to save for `step` on `rank` (tensors still live; staging copies).
    `replica=False` (a rank of a data-parallel replica other than the lowest-index one,
    whose model and optimizer state the lowest replica's ranks also hold): only this rank's
    own entries, the RNG states and the data-loader progress."""
    out: dict[str, Any] = {"step": step, "rng": {f"rank{rank}": rng_blob()}}
    if state.dataloader is not None:
        out["dataloader"] = {f"rank{rank}": encode_state(state.dataloader.state_dict())}
    if not replica:
        return out
    model_sd, optim_sd = _model_and_optim(state)
    out["model"] = model_sd
    if optim_sd is not None:
        out["optim"] = optim_sd
    if state.lr_scheduler is not None:
        out["lr_scheduler"] = state.lr_scheduler.state_dict()
    if state.extra:
        out["extra"] = {name: obj.state_dict() for name, obj in state.extra.items()}
    return out


def load_dict(state: TrainState, source_rank: int | None) -> dict[str, Any]:
    """The DCP state dict to load into: current tensors (the new layout) as targets.

    `source_rank`: which saved rank's RNG and data-loader entries this rank takes; None when
    the saved layout differs (the RNG is then left as seeded and the loader takes rank 0's
    progress, which is the global schedule position for driver.data's deterministic sampler).
    """
    model_sd, optim_sd = _model_and_optim(state)
    out: dict[str, Any] = {"model": model_sd, "step": 0}
    if optim_sd is not None:
        out["optim"] = optim_sd
    if state.lr_scheduler is not None:
        out["lr_scheduler"] = state.lr_scheduler.state_dict()
    if source_rank is not None:
        out["rng"] = {f"rank{source_rank}": b""}
    if state.dataloader is not None:
        out["dataloader"] = {f"rank{source_rank or 0}": b""}
    if state.extra:
        out["extra"] = {name: obj.state_dict() for name, obj in state.extra.items()}
    return out


def apply_dict(state: TrainState, loaded: dict[str, Any], source_rank: int | None) -> None:
    """Put a loaded DCP state dict back into the live objects."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_state_dict,
    )

    if state.optimizer is None:
        set_model_state_dict(state.model, loaded["model"], options=StateDictOptions(strict=True))
    else:
        set_state_dict(
            state.model,
            state.optimizer,
            model_state_dict=loaded["model"],
            optim_state_dict=loaded["optim"],
        )
    if state.lr_scheduler is not None:
        state.lr_scheduler.load_state_dict(loaded["lr_scheduler"])
    if state.dataloader is not None:
        blob = loaded["dataloader"][f"rank{source_rank or 0}"]
        state.dataloader.load_state_dict(decode_state(blob))
    for name, obj in state.extra.items():
        obj.load_state_dict(loaded["extra"][name])
    if source_rank is not None:
        restore_rng(loaded["rng"][f"rank{source_rank}"])
    state.step = int(loaded["step"])
