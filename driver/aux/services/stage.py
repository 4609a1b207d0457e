"""The data pipeline's remote stage as an auxiliary service.

`StageService` is the handler an `aux.services.<name>` entry names: it builds a data `Stage`
from `stage: module:Class` and `kwargs`, and serves it through `driver.aux.remote_stage`'s
`StageHandler` (method "process"). When `data.remote_stage` names the service, each worker's
feed (driver.data.feed) runs that stage on the service's workers, from its pipeline's
producers or in process, so one service serves the samples of several ranks. `RandomFlip`
is the shipped example stage (a seeded horizontal flip of an image).

    aux.services.flip: {handler: driver.aux.services.stage:StageService,
                        kwargs: {stage: "driver.aux.services.stage:RandomFlip"}}
    data: {loader: pipeline, remote_stage: flip}
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from driver.aux.remote_stage import StageHandler
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
