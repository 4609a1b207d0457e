"""Checkpoint configuration: one typed dataclass, the `checkpoint.*` keys of the driver config.

from driver.config.checkpoint import CheckpointConfig
cfg = CheckpointConfig(root="gs://my-ckpt-bucket", interval_steps=200, keep_last=3)

Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from catalog.errors import InputError

ASYNC_MODES = ("async", "sync")


@dataclass
class CheckpointConfig:
    """Where, when and how the training state is checkpointed and resumed."""

    root: str = "outputs/checkpoints"
    """Storage root: a local directory, or `gs://<bucket>` (the cluster's checkpoint bucket).
    Checkpoints of a run live under `<root>/<team>/<run>/step-<n>/`."""

    enabled: bool = True
    """Save checkpoints at all. Resume still works when this is off."""

    interval_steps: int = 500
    """Save after every step whose number is a multiple of this (0: only on request)."""

    keep_last: int = 3
    """Retention: keep the newest N committed checkpoints (0 keeps all of them)."""

    keep_every: int = 0
    """Retention: also keep every committed checkpoint whose step is a multiple of this
    (0: none), e.g. 10000 keeps step-10000, step-20000, ... forever."""

    async_mode: str = "async"
    """`async`: stage the state into host memory, return, write in a background thread.
    `sync`: block the loop until the checkpoint is written and committed."""

    overlap_staging: bool = False
    """Async mode only: `save` returns at once and the snapshot into host memory overlaps
    the next forward/backward; the loop must call `Checkpointer.staged()` before the
    optimizer step. Only for models whose forward/backward change no saved state (no
    BatchNorm running statistics)."""

    resume: str | None = "auto"
    """At start: `auto` resumes from the newest committed checkpoint of this run if there is
    one; a URI (`gs://b/team/run/step-400` or a local path) resumes from exactly that one;
    null starts fresh."""

    max_failures: int = 3
    """Worker-group restarts Ray Train allows before the run fails; every restart resumes
    from the newest committed checkpoint."""

    max_failed_saves: int = 3
    """Stop the run after this many saves in a row failed (a full disk, storage refusing
    writes): the workers stop together after the step that finds it, the driver prints one
    line and exits 1. 0: never stop, only count and report the failures."""

    preemption_budget_s: float = 25.0
    """Seconds after SIGTERM within which a final checkpoint must finish (GKE gives
    preemptible nodes about 30 s); the final save is skipped when earlier saves say it
    would not fit."""

    storage_timeout_s: float = 20.0
    """Before Ray Train starts, the run's storage (this root, and Ray Train's folder under
    it) must take a small write within this many seconds; otherwise the run stops with one
    line naming the URI and the reason (driver/checkpoint/reach.py)."""

    preemption_check_s: float = 1.0
    """How often the ranks agree whether a notice arrived (a two-number all-reduce, every
    so many steps that it comes about this often); a notice waits at most this long plus a
    step. 0 agrees after every step."""

    sync_files: bool = True
    """fsync every shard and the metadata before reporting them written (local storage)."""

    writer_threads: int = 1
    """I/O threads each rank uses to write its shard."""

    writer_nice: int = 19
    """CPU priority (nice, 0-19) of the background writer threads in async mode, so the
    write takes CPU the training loop leaves idle (0: same priority as the loop)."""

    write_chunk_mb: float = 1.0
    """In async mode the writer hands data to storage in pieces of this size and lets the
    training thread run between them; 0 writes each tensor in one call."""

    pin_memory: bool = True
    """Stage into pinned host memory when CUDA is available (faster device-to-host copies)."""

    def __post_init__(self) -> None:
        self.validate()

    @property
    def active(self) -> bool:
        """Whether the training driver checkpoints at all: periodic saves or a resume."""
        return self.interval_steps > 0 or self.resume is not None

    def validate(self, source: str | None = None) -> None:
        """Raise `InputError` naming `checkpoint.<field>` for the first bad value."""
        counts = ("interval_steps", "keep_last", "keep_every", "max_failures", "max_failed_saves")
        for name in counts:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                message = f"must be an integer >= 0, got {value!r}"
                raise InputError(source, f"checkpoint.{name}", message)
        if not 0 <= self.writer_nice <= 19:
            raise InputError(source, "checkpoint.writer_nice", "must be between 0 and 19")
        if self.write_chunk_mb < 0:
            raise InputError(source, "checkpoint.write_chunk_mb", "must be >= 0")
        if self.writer_threads < 1:
            raise InputError(source, "checkpoint.writer_threads", "must be >= 1")
        if self.async_mode not in ASYNC_MODES:
            message = f"must be one of {', '.join(ASYNC_MODES)}, got {self.async_mode!r}"
            raise InputError(source, "checkpoint.async_mode", message)
        if self.preemption_budget_s < 0:
            raise InputError(source, "checkpoint.preemption_budget_s", "must be >= 0")
        if not self.storage_timeout_s > 0:
            raise InputError(source, "checkpoint.storage_timeout_s", "must be > 0")
        if self.preemption_check_s < 0:
            raise InputError(source, "checkpoint.preemption_check_s", "must be >= 0")
        if not self.root:
            raise InputError(source, "checkpoint.root", "must not be empty")

    @classmethod
    def from_dict(cls, data: dict, source: str | None = None) -> CheckpointConfig:
        """Build from a plain mapping (e.g. the `checkpoint` node of the Hydra config)."""
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise InputError(source, f"checkpoint.{key}", "unknown key")
        config = cls.__new__(cls)
        for f in fields(cls):
            default = cls.__dataclass_fields__[f.name].default
            setattr(config, f.name, data.get(f.name, default))
        config.validate(source)
        return config
