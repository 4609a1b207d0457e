"""Configuration of the per-rank data pipeline (`PipelineConfig`).

from driver.data import PipelineConfig
cfg = PipelineConfig(batch_size=64, producers=4)
cfg = PipelineConfig.from_dict({"batch_size": 64}, source="runs/train/tiny-lm.yaml")
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from catalog.errors import InputError

_CHOICES = {
    "on_corrupt": ("skip", "fail"),
    "start_method": ("fork", "spawn", "forkserver"),
    "output": ("torch", "numpy"),
}


@dataclass(frozen=True)
class PipelineConfig:
    """How one rank's feeder → producers → collators pipeline is sized and behaves."""

    batch_size: int = 32
    """Samples per batch on this rank (the global batch is batch_size × world_size)."""
    producers: int = 2
    """Producer processes: each fetches one sample at a time and runs the stages on it."""
    collators: int = 1
    """Collator processes: each turns the samples of a step into one batch in shared memory."""
    prefetch_batches: int = 4
    """Shared-memory batch slots (≥ 2): batches prepared ahead, plus the one being used."""
    fetch_threads: int = 1
    """Threads per producer working on the samples of a task at once: raise it when fetching
    a sample mostly waits (object storage, a remote stage); CPU-bound work gains nothing."""
    task_size: int = 8
    """Samples per producer task: small balances uneven samples, large cuts queue overhead."""
    work_queue_size: int = 64
    """Bound of the feeder → producers queue of tasks."""
    sample_queue_size: int = 64
    """Bound of each producers → collator queue of finished samples."""
    slot_bytes: int = 64 << 20
    """Size of one shared-memory batch slot; a batch needing more fails with a clear error."""
    seed: int = 0
    """Seed of the global sampling schedule (same on every rank)."""
    shuffle: bool = True
    """Shuffle the schedule each epoch (a permutation from seed and epoch); else index order."""
    drop_last: bool = True
    """Drop the tail of the epoch that does not fill a global batch; else split it over ranks."""
    on_corrupt: str = "fail"
    """A sample whose fetch or stage raises: "fail" the run, or "skip" it (reported by index)."""
    max_skipped: int = 1000
    """With on_corrupt="skip": fail once more than this many samples were skipped in a run."""
    sample_timeout_s: float = 120.0
    """A producer working on one sample longer than this is reported hung (stage, index)."""
    collate_timeout_s: float = 120.0
    """A collator building one batch longer than this is reported hung (stage, step)."""
    batch_timeout_s: float = 600.0
    """Waiting longer than this for the next batch fails with the state of every stage."""
    startup_timeout_s: float = 120.0
    """Time allowed for all worker processes to start and report ready."""
    poll_interval_s: float = 0.2
    """How often the training process checks worker liveness while it waits for a batch."""
    start_method: str = "fork"
    """multiprocessing start method; "spawn"/"forkserver" need a picklable dataset and stages."""
    output: str = "torch"
    """Array leaves of a batch come back as torch tensors ("torch") or numpy arrays ("numpy")."""
    pack_in_memory: bool = True
    """Pack a plain list/tuple dataset into one byte buffer so workers do not copy it on read."""

    def __post_init__(self) -> None:
        for name, low in _MINIMUM.items():
            _at_least(name, getattr(self, name), low)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise InputError(None, "PipelineConfig.seed", "must be an integer")
        for name in ("shuffle", "drop_last", "pack_in_memory"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(None, f"PipelineConfig.{name}", "must be true or false")
        for name in _SECONDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InputError(None, f"PipelineConfig.{name}", "must be a number > 0")
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise InputError(
                    None, f"PipelineConfig.{name}", f"must be one of {', '.join(allowed)}"
                )

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], source: str | None = None, section: str = "data"
    ) -> PipelineConfig:
        """Build from a mapping (the `section` of a config file); unknown keys are rejected.
        Errors name the file and `section.key`."""
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise InputError(source, f"{section}.{key}", "unknown key")
        try:
            return cls(**data)
        except InputError as err:
            field = err.field.replace("PipelineConfig.", f"{section}.", 1)
            raise InputError(source, field, err.message) from None


_MINIMUM = {
    "batch_size": 1, "producers": 1, "collators": 1, "fetch_threads": 1, "task_size": 1,
    "work_queue_size": 1, "sample_queue_size": 1, "prefetch_batches": 2, "slot_bytes": 4096,
    "max_skipped": 0,
}  # fmt: skip
_SECONDS = (
    "sample_timeout_s", "collate_timeout_s", "batch_timeout_s", "startup_timeout_s",
    "poll_interval_s",
)  # fmt: skip


def _at_least(name: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InputError(None, f"PipelineConfig.{name}", f"must be an integer ≥ {low}")
