"""The training loop's DiLoCo hook: a learner when `REVE_DILOCO_ADDRESS` is set, else nothing.

    check_env()                          # the driver, before launch: bad settings, one line
    diloco = attach(model)               # every rank, after the model is built and restored
    diloco.after_step(step, model)       # after each optimizer and scheduler step
    diloco.end(model, finished=True)     # the last round's merge, then close the link

`runner` renders the `REVE_DILOCO_*` settings of each learner of an experiment
(runner.experiment.learner_env); docs/diloco.md.
"""

from __future__ import annotations

import logging
import os

from catalog.errors import InputError
from driver.diloco.config import LearnerConfig

log = logging.getLogger("driver.diloco.hook")
SOURCE = "environment"


def config(environ: dict | None = None) -> LearnerConfig | None:
    """The learner's settings, or None without REVE_DILOCO_ADDRESS; bad ones: InputError."""
    try:
        cfg = LearnerConfig.from_env(environ)
        if cfg:
            cfg.curve()  # the keys are there and well formed
        return cfg
    except ValueError as err:
        raise InputError(SOURCE, None, str(err)) from None


def check_env(environ: dict | None = None) -> None:
    """Fail early, on one line, on bad `REVE_DILOCO_*` settings."""
    config(os.environ if environ is None else environ)


class Hook:
    """The learner the loop calls (a no-op without one)."""

    def __init__(self, learner=None):
        self.learner = learner

    def __bool__(self) -> bool:
        return self.learner is not None

    def after_step(self, step: int, model) -> None:
        if self.learner is not None:
            self.learner.after_step(step, model)

    def end(self, model, finished: bool = True) -> None:
        """Wait for the last round's merge when training finished; always close the link."""
        if self.learner is None:
            return
        try:
            if finished:
                self.learner.finish(model)
        finally:
            self.learner.close()


def attach(model, environ: dict | None = None) -> Hook:
    """Join the synchronizer (every rank; rank 0 talks to it) when DiLoCo is configured."""
    cfg = config(environ)
    if cfg is None:
        return Hook()
    from driver.diloco.learner import make

    learner = make(cfg, model)
    learner.start(model)
    log.info("DiLoCo learner %s joined %s (H=%d, %s)", cfg.learner, cfg.address,
             cfg.sync_every, cfg.mode)  # fmt: skip
    return Hook(learner)
