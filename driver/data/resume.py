"""A data pipeline's progress in a checkpoint: `Checkpointable` (the state_dict /
load_state_dict side of `DataPipeline`) and the checks of a saved state before resuming.

check_state(state, dataset_len=len(ds), seed=cfg.seed, shuffle=cfg.shuffle, digest=fn)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from driver.data.errors import PipelineError
from driver.data.sampling import position_after, schedule_digest

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


class Checkpointable:
    """Mixin of DataPipeline: its position in the schedule, saved and restored. The
    pipeline owns config, dataset, rank, world_size, epoch, origin, consumed, skipped,
    `_buffer` (batches received ahead) and `close()`."""

    def position(self) -> int:
        """Global position in the epoch: samples consumed by all ranks together."""
        cfg = self.config
        return position_after(
            self.consumed, len(self.dataset), cfg.batch_size, self.world_size, self.origin,
            cfg.drop_last,
        )  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """Progress to store in a checkpoint; in-flight batches are rebuilt on resume."""
        cfg = self.config
        return {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "position": self.position(),
            "dataset_len": len(self.dataset),
            "seed": cfg.seed,
            "shuffle": cfg.shuffle,
            "schedule_digest": self._schedule_digest(self.epoch),
            "batch_size": cfg.batch_size,
            "world_size": self.world_size,
            "rank": self.rank,
            "in_flight": sorted(step for epoch, step in self._buffer if epoch == self.epoch),
            "skipped": len(self.skipped),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where `state` stopped (any world size); restarts the workers."""
        cfg = self.config
        epoch, position = check_state(
            state, len(self.dataset), cfg.seed, cfg.shuffle, self._schedule_digest
        )
        self.close()
        self.epoch, self.origin, self.consumed = epoch, position, 0

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning (restarts the workers)."""
        self.close()
        self.epoch, self.origin, self.consumed = epoch, 0, 0

    def _schedule_digest(self, epoch: int) -> str:
        cfg = self.config
        return schedule_digest(cfg.seed, epoch, len(self.dataset), cfg.shuffle)
