"""Checkpointing and resume with PyTorch Distributed Checkpoint (DCP).

    from driver.checkpoint import CheckpointConfig, Checkpointer, TrainState
    ckpt = Checkpointer(CheckpointConfig(root="outputs/checkpoints"), "team", "run", rank, ws)

See docs/checkpoint.md. `CheckpointConfig` and the layout rules import without torch; the
rest loads torch on first use.
"""

from __future__ import annotations

from importlib import import_module

from driver.checkpoint.errors import CheckpointError
from driver.config.checkpoint import CheckpointConfig

_LAZY = {
    "Checkpointer": "driver.checkpoint.checkpointer",
    "CheckpointCallback": "driver.checkpoint.api",
    "CheckpointRef": "driver.checkpoint.api",
    "TrainState": "driver.checkpoint.state",
    "PreemptionGuard": "driver.checkpoint.preemption",
    "failure_config": "driver.checkpoint.restarts",
}

__all__ = ["CheckpointConfig", "CheckpointError", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'driver.checkpoint' has no attribute {name!r}")
