"""Stages: the per-sample work a producer runs after fetching a sample, behind a transport.

A `Stage` is pure per-sample work (`process(sample, ctx)`). Producers never call a stage
directly: they call the `StageClient` returned by `stage.client()`. The local client runs
the stage in the producer process. A stage served by auxiliary workers (one service
serving several ranks, e.g. an expensive decoder or encoder) returns instead a client that
ships the sample with `codec.to_frames` over the auxiliary-service transport and waits for
the reply; nothing else in the pipeline changes (see docs/data.md).

    class Decode(Stage):
        def process(self, sample, ctx): return decode_jpeg(sample["jpg"])
    DataPipeline(ds, cfg, rank, world, stages=[Decode(), FunctionStage(normalize)])
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from driver.data.codec import Stack


@dataclass(frozen=True)
class SampleContext:
    """What a stage knows about the sample it transforms."""

    index: int
    """Index of the sample in the dataset."""
    epoch: int
    """Epoch the sample is drawn for."""
    seed: int
    """Seed for the sample's random transforms (same on resume, any rank, any worker)."""
    rank: int
    """Training rank the sample is for."""

    def rng(self) -> np.random.Generator:
        """A numpy generator seeded for this sample and epoch."""
        return np.random.default_rng(self.seed)


@dataclass(frozen=True)
class WorkerInfo:
    """The process a stage is set up in."""

    role: str
    """Stage role: "producer" or "collator"."""
    worker_id: int
    """Index of the worker among its role."""
    rank: int
    """Training rank the pipeline serves."""


class StageClient(Protocol):
    """How a producer reaches a stage: in process, or across a transport."""

    def process(self, sample: Any, ctx: SampleContext) -> Any: ...

    def close(self) -> None: ...


class Stage(ABC):
    """Per-sample work. Subclasses implement `process`; `setup` runs once per worker."""

    name: str = "stage"

    def setup(self, worker: WorkerInfo) -> None:  # noqa: B027 - optional hook
        """Open files, load models, ... once in the worker process that runs the stage."""

    @abstractmethod
    def process(self, sample: Any, ctx: SampleContext) -> Any:
        """Transform one sample; raising marks the sample corrupt (see on_corrupt)."""

    def teardown(self) -> None:  # noqa: B027 - optional hook
        """Release what `setup` acquired."""

    def client(self, worker: WorkerInfo) -> StageClient:
        """The client a producer calls; the local one runs the stage in the producer."""
        return LocalStageClient(self, worker)


class LocalStageClient:
    """Runs a stage in the calling process."""

    def __init__(self, stage: Stage, worker: WorkerInfo):
        self.stage = stage
        stage.setup(worker)

    def process(self, sample: Any, ctx: SampleContext) -> Any:
        return self.stage.process(sample, ctx)

    def close(self) -> None:
        self.stage.teardown()


class FunctionStage(Stage):
    """A stage from a function `f(sample)` or, with `with_context=True`, `f(sample, ctx)`."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, with_context: bool = False):
        self.fn = fn
        self.with_context = with_context
        self.name = name or getattr(fn, "__name__", "function")

    def process(self, sample: Any, ctx: SampleContext) -> Any:
        return self.fn(sample, ctx) if self.with_context else self.fn(sample)


def as_stages(stages: Sequence[Stage | Callable[..., Any]] | None) -> list[Stage]:
    """Normalise a list of stages or plain functions into Stage objects."""
    out: list[Stage] = []
    for item in stages or ():
        out.append(item if isinstance(item, Stage) else FunctionStage(item))
    return out


def default_collate(samples: list[Any]) -> Any:
    """Stack a list of samples: arrays/tensors stacked, numbers to an array, others listed."""
    return collate_tree(samples, lazy=False)


def collate_tree(samples: list[Any], lazy: bool) -> Any:
    """`default_collate`; with `lazy`, equal numpy arrays become `codec.Stack` leaves that
    the collator stacks straight into the batch slot."""
    first = samples[0]
    if isinstance(first, dict):
        return {key: collate_tree([s[key] for s in samples], lazy) for key in first}
    if type(first) in (list, tuple):
        groups = zip(*samples, strict=True)
        return type(first)(collate_tree(list(group), lazy) for group in groups)
    if isinstance(first, np.ndarray) and not first.dtype.hasobject:
        return Stack(samples) if lazy and Stack.fits(samples) else np.stack(samples)
    if isinstance(first, bool | int | float | np.number | np.bool_):
        return np.asarray(samples)
    if type(first).__module__.startswith("torch") and hasattr(first, "untyped_storage"):
        import torch

        return torch.stack(samples)
    return list(samples)
