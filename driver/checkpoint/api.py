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
    same_layout: bool = True
    """Loaded by the world size that saved it: each rank got its own RNG states back."""


def new_counters() -> dict[str, float]:
    """The metrics a Checkpointer keeps (the loop reports them as they are)."""
    return {
        "saves_started": 0,
        "saves_written": 0,
        "saves_committed": 0,
        "saves_failed": 0,
        "saves_failed_in_a_row": 0,
        "callback_failures": 0,
        "loads": 0,
        "last_committed_step": -1,
        "last_blocked_s": 0.0,
        "last_write_s": 0.0,
    }


def row_fields(counters: dict[str, float], last_error: str | None, reported: int) -> dict:
    """The checkpoint fields of one metrics row: the newest committed step, the failed saves
    so far and, when some failed since `reported` failures were last reported, the error."""
    fields = {
        "ckpt_committed_step": int(counters["last_committed_step"]),
        "ckpt_failures": int(counters["saves_failed"]),
    }
    if counters["saves_failed"] > reported and last_error:
        fields["ckpt_error"] = last_error
    return fields
