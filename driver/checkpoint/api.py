"""The small public types of the checkpoint subsystem: callbacks, references, counters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class CheckpointCallback(Protocol):
    """An auxiliary service told about every committed checkpoint (called on rank 0)."""

    def on_checkpoint(self, step: int, uri: str) -> None: ...


@dataclass(frozen=True)
class CheckpointRef:
    """One committed checkpoint."""

    step: int
    uri: str


def new_counters() -> dict[str, float]:
    """The metrics a Checkpointer keeps (the loop reports them as they are)."""
    return {
        "saves_started": 0,
        "saves_written": 0,
        "saves_committed": 0,
        "saves_failed": 0,
        "callback_failures": 0,
        "loads": 0,
        "last_committed_step": -1,
        "last_blocked_s": 0.0,
        "last_write_s": 0.0,
    }
