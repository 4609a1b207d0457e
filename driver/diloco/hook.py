"""The training loop's DiLoCo learner: a learner when `diloco.address` is set, else nothing.

    diloco = prepare(model, cfg.diloco)  # every rank, once the model is built (DDP or FSDP)
    TrainState(..., extra=diloco.checkpoint_state())  # its sync state goes into checkpoints
    ...restore the checkpoint...
    diloco.start(model)                  # join (a restored learner resumes its rounds)
    diloco.after_step(step, model)       # after each optimizer and scheduler step
    diloco.end(model, finished=True)     # the last round's merge, then close the link

Under torchft (`ft.enabled`) a learner is the whole fault-tolerant run:
`prepare_ft(model, cfg.diloco, group, groups)` gives the hook of one replica group, whose learner
(driver.diloco.replicas.FtLearner) also rides on each step's commit vote and heals with
the group's state (driver.ft.replica).

`attach(model, cfg)` is prepare and start in one (a loop that does not checkpoint the
learner: after a restart it takes the shared weights and starts its schedule again).
`runner` renders each learner of an experiment as `diloco.*` overrides; docs/diloco.md.
"""

from __future__ import annotations

import logging

from driver.config.diloco import LearnerConfig

log = logging.getLogger("driver.diloco.hook")


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
            log.info("DiLoCo learner %s of %s (H=%d, %s)", cfg.learner, cfg.address,
                     cfg.sync_every, cfg.mode)  # fmt: skip

    def after_step(self, step: int, model) -> None:
        if self.learner is not None:
            self.learner.after_step(step, model)

    def metrics(self) -> dict:
        """The learner's fields of a step's metrics row: its round, merges applied so far,
        seconds spent waiting for the synchronizer."""
        if self.learner is None:
            return {}
        learner = self.learner
        return {"diloco_round": learner.round, "diloco_merges": len(learner.merges),
                "diloco_wait_s": learner.wait_s}  # fmt: skip

    def end(self, model, finished: bool = True) -> None:
        """Wait for the last round's merge when training finished; always close the link."""
        if self.learner is None:
            return
        try:
            if finished:
                self.learner.finish(model)
        finally:
            self.learner.close()


def prepare(model, cfg: LearnerConfig | None) -> Hook:
    """The learner when `cfg.address` is set (every rank; rank 0 talks to the
    synchronizer), not joined yet: restore its checkpoint state, then `start`."""
    if cfg is None or not cfg.address:
        return Hook()
    from driver.diloco.learner import make

    return Hook(make(cfg, model), model, cfg)


def prepare_ft(model, cfg: LearnerConfig | None, group: int, groups: int) -> Hook:
    """The learner of torchft replica group `group` of `groups`, when `cfg.address` is
    set: its `learner` (an FtLearner) goes into the group's FtReplica (`state`, `outer`)."""
    if cfg is None or not cfg.address:
        return Hook()
    from driver.diloco.replicas import FtLearner

    return Hook(FtLearner(cfg, model, group, groups), model, cfg)


def attach(model, cfg: LearnerConfig | None) -> Hook:
    """Prepare and join at once (no checkpointed sync state)."""
    hook = prepare(model, cfg)
    hook.start(model)
    return hook
