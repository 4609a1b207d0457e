"""Ray Train's controller loop on a thread of the driver's process (driver/raytrain/controller.py
runs it there for every run): `ControllerThread` runs it on an event loop of its own
and can cancel it from another thread; `stop` is Ray Train's abort short of ending an
actor's process."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from ray.train.v2._internal.execution.controller import TrainController

STOP_TIMEOUT_S = 30.0
"""How long an interrupted driver waits for its controller to stop the workers."""


class ControllerThread(threading.Thread):
    """Ray Train's controller loop on an event loop of this thread; `error` is what ended
    it, if anything did; `cancel` stops it from another thread."""

    def __init__(self, controller: TrainController):
        super().__init__(name="ray-train-controller", daemon=True)
        self.controller, self.error = controller, None
        self.loop = asyncio.new_event_loop()
        self.task: asyncio.Task | None = None

    def run(self) -> None:
        try:
            self.task = self.loop.create_task(self.controller.run())
            self.loop.run_until_complete(self.task)
        except BaseException as err:  # noqa: BLE001 (handed to the waiting thread)
            self.error = err
            stop(self.controller)
        finally:
            self.loop.close()

    def cancel(self, timeout_s: float) -> None:
        """Cancel the loop at its next wait (the controller polls its workers every few
        seconds), let it stop the workers, and wait up to `timeout_s` for that."""
        with contextlib.suppress(RuntimeError):  # the loop has already closed
            self.loop.call_soon_threadsafe(lambda: self.task and self.task.cancel())
        self.join(timeout_s)


def stop(controller: TrainController) -> None:
    """What Ray Train's `TrainController.abort` does, short of ending an actor's process:
    the abort callbacks, then the worker group's actors and placement group released, so
    that nothing of the run is left starting when the driver's Ray shuts down."""
    with contextlib.suppress(Exception):
        controller._controller_callback_manager.invoke_best_effort("before_controller_abort")
    group = controller._worker_group
    if group is not None:
        with contextlib.suppress(Exception):
            group.abort()
