"""Stopping a torchft run below `ft.min_replicas`: at once, with the one-line reason.

A replica group that finds fewer than `ft.min_replicas` groups left raises `FtStopped`
(driver.ft.replica). To Ray Train 2.60 that is a worker failure like any other: its
`DefaultFailurePolicy` (ray/train/v2/_internal/execution/failure_handling/default.py)
retries every `WorkerGroupError` until `FailureConfig.max_failures`, and with a failing
group next to live ones the controller replaces groups rather than stopping. `FtStopCallback`
is a controller callback that ends that: when the controller is about to retry a failure
that holds an FtStopped, it raises; Ray Train routes a callback's error through the failure
policy as a `ControllerError`, which it never retries, so the run errors out at the next
health check. `trainer_parts` installs it through Ray Train's own `RAY_TRAIN_CALLBACKS`
variable (the trainer instantiates the classes named there in the driver at `fit`).

    try:
        trainer.fit()
    except Exception as err:
        reason = stop_reason(err)    # "ft: no quorum of ft.min_replicas=2 ...", or None

The newest committed checkpoint is untouched (the stopping group writes no final
checkpoint), so running again with `checkpoint.resume` continues from it.
"""

from __future__ import annotations

import os

from ray.train.v2._internal.execution.callback import ControllerCallback

from driver.ft.replica import FtStopped

CALLBACKS_ENV = "RAY_TRAIN_CALLBACKS"  # ray.train.v2._internal.constants
CALLBACK_PATH = "driver.ft.stop.FtStopCallback"
STOPPED_EXIT = 3
"""The driver's exit code when a torchft run stopped below `ft.min_replicas`."""


def stop_reason(err: BaseException | None, depth: int = 0) -> str | None:
    """The one-line reason of the FtStopped inside a Ray Train error (a ControllerError's
    failure, a WorkerGroupError's worker failures, causes), or None."""
    if err is None or depth > 8:
        return None
    if isinstance(err, FtStopped):
        return str(err).splitlines()[0]
    inner = [getattr(err, "controller_failure", None), err.__cause__]
    inner += list(getattr(err, "worker_failures", {}).values())
    for other in inner:
        if other is not None and other is not err:
            reason = stop_reason(other, depth + 1)
            if reason:
                return reason
    return None


def install() -> None:
    """Add FtStopCallback to the controller callbacks Ray Train reads from the environment
    (once; harmless to runs without ft: it acts only on an FtStopped)."""
    names = [n for n in os.environ.get(CALLBACKS_ENV, "").split(",") if n.strip()]
    if CALLBACK_PATH not in names:
        os.environ[CALLBACKS_ENV] = ",".join([*names, CALLBACK_PATH])


class FtStopCallback(ControllerCallback):
    """Turns the retry of a failure caused by FtStopped into the end of the run."""

    def after_controller_state_update(self, previous_state, current_state) -> None:
        retrying = type(current_state).__name__ in ("RestartingState", "ReschedulingState")
        reason = stop_reason(getattr(current_state, "training_failed_error", None))
        if retrying and reason:
            raise FtStopped(reason)
