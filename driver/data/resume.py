"""Checks of a saved data-pipeline state before resuming from it (pure functions).

check_state(state, dataset_len=len(ds), seed=cfg.seed, shuffle=cfg.shuffle, digest=fn)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from driver.data.errors import PipelineError

STATE_VERSION = 1
REQUIRED = ("epoch", "position", "dataset_len", "seed", "shuffle")


def check_state(
    state: dict[str, Any], dataset_len: int, seed: int, shuffle: bool, digest: Callable[[int], str]
) -> tuple[int, int]:
    """(epoch, position) to resume at; raises if `state` belongs to another schedule."""
    missing = [key for key in REQUIRED if key not in state]
    if missing:
        raise PipelineError(f"data state lacks {', '.join(missing)}; is it a pipeline state?")
    for key, mine in (("dataset_len", dataset_len), ("seed", seed), ("shuffle", shuffle)):
        if state[key] != mine:
            raise PipelineError(
                f"data state has {key}={state[key]!r} but this pipeline has {mine!r}; "
                "resuming would break the sampling schedule"
            )
    epoch, position = int(state["epoch"]), int(state["position"])
    if not 0 <= position <= dataset_len or epoch < 0:
        raise PipelineError(
            f"data state position {position} (epoch {epoch}) is outside 0..{dataset_len}"
        )
    if state.get("schedule_digest") not in (None, digest(epoch)):
        raise PipelineError("the sampling schedule differs from the checkpoint's")
    return epoch, position
