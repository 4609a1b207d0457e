"""The training loop of every layout: a stepper and the hooks around its steps.

    trainer = Trainer(cfg, stepper, hooks, reporter, logger)
    final = trainer.run()            # the run's final figures from this worker

The stepper (driver.trainer.plain: DDP/FSDP; driver.ft.stepper: torchft) runs one optimizer
step and returns its metrics row, or None when a torchft commit failed (the same step runs
again). Everything around a step is a hook (driver.trainer.hooks), called in order after
each committed step: the DiLoCo outer step, the checkpoint, the auxiliary services' weight
refresh and figures, the metrics reporter, fault injection; then every hook is asked
whether the run stops here (a preemption notice, saves failing). On a failure every hook
abandons (a staged checkpoint gets a bounded chance to commit); at the end each hook closes,
in order, and gives its part of the final figures.
"""

from __future__ import annotations


class RunFinished(Exception):  # noqa: N818 (an outcome: the run ended without this worker)
    """The run's last step was committed by other torchft groups while this one waited."""


class Trainer:
    """A stepper, its hooks and the worker's reporter: the loop of one training worker."""

    def __init__(self, cfg, stepper, hooks, reporter, logger):
        self.cfg, self.stepper, self.hooks = cfg, stepper, list(hooks)
        self.reporter, self.logger = reporter, logger
        self.steps = cfg.train.steps
        self.row: dict = {}
        """The newest committed step's row."""
        self.writer = False
        """Whether this rank wrote the newest step's records."""
        self.finished_elsewhere = False
        """The run ended without this worker (torchft: other groups committed the end)."""
        self.stopped = False
        """Whether a hook stopped the run early here (a notice, saves failing)."""
        self.reports = False
        """Whether this rank sends the run's final figures (set as the loop ends)."""

    def run(self) -> dict:
        """Train to `train.steps` or an early stop; this worker's final figures."""
        finished = False
        try:
            for hook in self.hooks:
                hook.start(self)
            self._steps()
            finished = True
        except BaseException:
            try:
                for hook in self.hooks:
                    hook.abandon(self)
            finally:
                self.reporter.flush()
                self.stepper.close()
            raise
        return self._close(finished)

    def _steps(self) -> None:
        while self.stepper.step < self.steps:
            try:
                row = self.stepper.run()
            except RunFinished:
                self.logger.info("the run finished without this worker")
                self.finished_elsewhere = True
                return
            if row is None:  # the commit vote failed: the same step runs again
                continue
            self.row, self.writer = row, self.stepper.writer()
            self.logger.info("step %d loss %.4f", row["step"], row["loss"])
            for hook in self.hooks:
                hook.after_step(self, row)
            stops = [hook.should_stop(self, row["step"]) for hook in self.hooks]  # all of them
            if any(stops):  # a group leaving is not the run stopping (`finished_elsewhere`)
                self.stopped = not self.finished_elsewhere
                return

    def _close(self, finished: bool) -> dict:
        final = {"final_loss": self.row.get("loss"), "steps": self.steps}
        completed = finished and not self.finished_elsewhere and self.stepper.step >= self.steps
        try:
            self.reports = finished and self.stepper.end(self.reporter, self.logger, completed,
                                                         stopped=self.stopped)  # fmt: skip
            self.reporter.flush()
        finally:
            for hook in self.hooks:
                final.update(hook.close(self, finished) or {})
            final.update(self.stepper.metrics())
            self.stepper.close()
        return final
