"""Streaming DiLoCo: the model in fragments, each synced every H steps on its own schedule.

    learner = make(cfg, model)        # learner.make: Streaming when cfg.fragments > 1

`Streaming` has the methods of `learner.Learner` and holds one per fragment (contiguous
groups of parameters of about equal size, `outer.partition`), each with its own connection,
round, snapshot and staggered schedule, so a sync point moves 1/fragments of the weights
(docs/diloco.md, "Streaming sync").
"""

from __future__ import annotations

import torch

from driver.config.diloco import LearnerConfig
from driver.diloco import outer, weights
from driver.diloco.learner import Learner


def fragment_names(cfg: LearnerConfig, model: torch.nn.Module) -> list[list[str] | None]:
    """The parameter names of each part: [None] (all) unless the learner streams."""
    if cfg.fragments == 1:
        return [None]
    sizes = [(k, p.numel()) for k, p in weights.named(model).items()]
    return outer.partition(sizes, cfg.fragments)


class Parts:
    """What a learner made of parts (`self.parts`, one `Learner` per fragment) reports."""

    parts: list[Learner]

    def close(self) -> None:
        for part in self.parts:
            part.close()

    @property
    def round(self) -> int:
        return min(part.round for part in self.parts)

    @property
    def merges(self) -> list[dict]:
        return sorted((m for p in self.parts for m in p.merges), key=lambda m: m["step"])

    @property
    def wait_s(self) -> float:
        return sum(part.wait_s for part in self.parts)

    @property
    def pushes(self) -> list[dict]:
        return [push for part in self.parts for push in part.pushes]

    @property
    def sent_bytes(self) -> int:
        return sum(part.sent_bytes for part in self.parts)


class Streaming(Parts):
    """Streaming sync: the model in `cfg.fragments` fragments (contiguous, of about equal
    size), each a `Learner` with its own connection, round and staggered schedule. Same
    methods as Learner."""

    def __init__(self, cfg: LearnerConfig, model: torch.nn.Module):
        names = fragment_names(cfg, model)
        self.parts = [Learner(cfg, f, n) for f, n in enumerate(names)]

    def start(self, model: torch.nn.Module) -> None:
        for part in self.parts:
            part.start(model)

    def after_step(self, step: int, model: torch.nn.Module) -> None:
        for part in self.parts:
            part.after_step(step, model)

    def finish(self, model: torch.nn.Module) -> None:
        for part in self.parts:
            part.finish(model)
