"""The training loop's DiLoCo hook: a learner when `REVE_DILOCO_ADDRESS` is set, else nothing.

    check_env()                          # the driver, before launch: bad settings, one line
    diloco = prepare(model)              # every rank, once the model is built
    TrainState(..., extra=diloco.checkpoint_state())  # its sync state goes into checkpoints
    ...restore the checkpoint...
    diloco.start(model)                  # join (a restored learner resumes its rounds)
    diloco.after_step(step, model)       # after each optimizer and scheduler step
    diloco.end(model, finished=True)     # the last round's merge, then close the link

`attach(model)` is prepare and start in one (a loop that does not checkpoint the learner:
after a restart it takes the shared weights and starts its schedule again).

`runner` renders the `REVE_DILOCO_*` settings of each learner of an experiment
(runner.experiment.learner_env); docs/diloco.md.
"""

from __future__ import annotations

import logging
import os

from catalog.errors import InputError
from driver.config.diloco import LearnerConfig

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

    def __init__(self, learner=None, model=None, cfg: LearnerConfig | None = None):
        self.learner, self.model, self.cfg = learner, model, cfg

    def __bool__(self) -> bool:
        return self.learner is not None

    def checkpoint_state(self) -> dict:
        """`{"diloco": LearnerState}` for TrainState.extra, or {} without a learner."""
        if self.learner is None:
            return {}
        from driver.diloco.resume import LearnerState

        return {"diloco": LearnerState(self.learner, self.model)}

    def start(self, model) -> None:
        """Join the synchronizer (after a checkpoint, if any, was restored)."""
        if self.learner is not None:
            self.learner.start(model)
            cfg = self.cfg
            log.info("DiLoCo learner %s joined %s (H=%d, %s)", cfg.learner, cfg.address,
                     cfg.sync_every, cfg.mode)  # fmt: skip

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


def prepare(model, environ: dict | None = None) -> Hook:
    """The learner when DiLoCo is configured (every rank; rank 0 talks to the synchronizer),
    not joined yet: restore its checkpoint state, then `start`."""
    cfg = config(environ)
    if cfg is None:
        return Hook()
    if any(type(p).__name__ == "DTensor" for p in model.parameters()):
        raise InputError(SOURCE, "parallelism.fsdp_size", "a DiLoCo learner syncs whole "
                         "parameters: FSDP-sharded ones are not supported")  # fmt: skip
    from driver.diloco.learner import make

    return Hook(make(cfg, model), model, cfg)


def attach(model, environ: dict | None = None) -> Hook:
    """Prepare and join at once (no checkpointed sync state)."""
    hook = prepare(model, environ)
    hook.start(model)
    return hook
