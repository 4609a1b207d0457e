"""The data pipeline's remote stage as an auxiliary service, and the batch source that uses it.

`StageService` is the handler an `aux.services.<name>` entry names: it builds a data `Stage`
from `stage: module:Class` and `kwargs`, and serves it through `driver.aux.remote_stage`'s
`StageHandler` (method "process"). `RemoteStageSource` is the batch source
(`data.source: driver.aux.services.stage:RemoteStageSource`) that runs the shared-memory
pipeline with that stage on the service's workers; the loop passes it the stage when
`data.remote_stage` names the service, so one service serves the producers of several
ranks. `RandomFlip` is the shipped example stage (a seeded horizontal flip of an image).

    aux.services.flip: {handler: driver.aux.services.stage:StageService,
                        kwargs: {stage: "driver.aux.services.stage:RandomFlip"}}
    data: {source: driver.aux.services.stage:RemoteStageSource, remote_stage: flip}
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.aux.remote_stage import StageHandler
from driver.batches import PipelineSource
from driver.data.stages import SampleContext, Stage


def import_object(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class StageService(StageHandler):
    """Handler: the Stage `stage` ("module:Class") built with `kwargs`."""

    def __init__(self, stage: str, kwargs: dict | None = None):
        built = import_object(stage)(**(kwargs or {}))
        if not isinstance(built, Stage):
            raise TypeError(f"{stage} is not a driver.data.stages.Stage")
        super().__init__(built)


class RandomFlip(Stage):
    """Flips an image (channels, H, W) left-right with probability `p`, seeded per sample
    (the same choice on any worker, after a resume too)."""

    name = "flip"

    def __init__(self, p: float = 0.5):
        self.p = p

    def process(self, sample: Any, ctx: SampleContext) -> Any:
        image = np.asarray(sample)
        if ctx.rng().random() < self.p:
            return np.ascontiguousarray(image[..., ::-1])
        return image


class RemoteStageSource(PipelineSource):
    """The shared-memory pipeline (driver.batches.PipelineSource) with `stages` run by
    auxiliary workers (driver.aux.remote_stage.RemoteStage, given by the training loop)."""

    def __init__(self, dataset, batch_size: int, rank: int, world_size: int, seed: int,
                 stages: Sequence[Stage] = ()):  # fmt: skip
        from driver.data import DataPipeline, PipelineConfig

        config = PipelineConfig(batch_size=batch_size, producers=1, seed=seed)
        self.pipeline = DataPipeline(
            dataset, config, rank=rank, world_size=world_size, stages=list(stages)
        )
