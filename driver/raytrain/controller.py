"""Ray Train's controller for every run, embedded or in a cluster, in the driver's own process.

`run_controller` runs Ray Train's `TrainController` in the driver's process instead of in an
actor of its own: that actor's process would start and import Ray Train, Ray Data and the
backend (seconds of CPU) before it could ask for the training workers, which wait for it;
the driver has imported them already, while Ray's daemons started (driver/launch.py; in a
cluster, on the head node, where Ray Train would place the actor too). The controller lives
and dies with the driver, as the actor did (the driver owned it), and so does the workers'
placement group. Ray Train hands the workers the controller's handle only for
`ray.train.get_all_reported_checkpoints`, which the driver's loop does not call
(`LocalWorkerGroup`).

This module imports Ray Train: import it only when building a trainer (driver/raytrain/lean.py).
"""

from __future__ import annotations

import os

import ray
from ray._common.utils import env_bool
from ray.train.constants import RAY_TRAIN_ENABLE_STATE_TRACKING
from ray.train.v2._internal.constants import (
    ENABLE_CONTROLLER_STRUCTURED_LOGGING_ENV_VAR as CONTROLLER_LOG_ENV,
)
from ray.train.v2._internal.execution.controller import TrainController
from ray.train.v2._internal.execution.worker_group import WorkerGroup

from driver.raytrain import lazy_sync
from driver.raytrain.controller_thread import STOP_TIMEOUT_S, ControllerThread


def inherited_runtime_env(runtime_env: dict, started_env: dict[str, str]) -> dict:
    """The training workers' runtime environment: none (`{}`) when all it would do is set
    variables to the values the embedded Ray's processes inherited from the driver
    (`started_env`), else `runtime_env` itself. Ray starts a worker process of its own for
    every distinct runtime environment; with none, the training workers take the processes
    Ray started beside itself (one per CPU), which would otherwise idle for the whole run,
    instead of starting two more. In a cluster this process started no Ray, `started_env`
    is empty, and the workers keep their runtime environment."""
    if set(runtime_env) - {"env_vars"}:
        return runtime_env
    wanted = runtime_env.get("env_vars") or {}
    if all(started_env.get(key) == value for key, value in wanted.items()):
        return {}
    return runtime_env


class LocalWorkerGroup(WorkerGroup):
    """Ray Train's worker group for a controller that is not an actor: the workers' train
    context gets no controller handle (Ray Train uses it only in
    `ray.train.get_all_reported_checkpoints`, which the driver's loop never calls), and the
    workers no runtime environment that only repeats what they inherit
    (`inherited_runtime_env`)."""

    @staticmethod
    def _get_worker_runtime_env(custom_runtime_env):
        from driver.embedded.lean import STARTED_ENV

        runtime_env = WorkerGroup._get_worker_runtime_env(custom_runtime_env)
        return inherited_runtime_env(runtime_env, STARTED_ENV)

    def _init_train_context_on_workers(self, workers, sync_actor, train_context_args) -> None:
        # Ray 2.60's method, with controller_actor=None instead of the current actor.
        ray.get([
            worker.actor.init_train_context.remote(
                train_run_context=self._train_run_context,
                distributed_context=worker.distributed_context,
                synchronization_actor=sync_actor,
                storage_context=self._storage_context,
                worker_callbacks=self._worker_callbacks_to_propagate,
                controller_actor=None,
                **{arg: values[i] for arg, values in train_context_args.items()},
            )
            for i, worker in enumerate(workers)
        ])  # fmt: skip
        self._decorate_worker_log_file_paths(workers)


class LocalController(TrainController):
    """Ray Train's controller, run in the driver's process (`run_controller`)."""

    worker_group_cls = LocalWorkerGroup


def in_process_ok() -> bool:
    """Whether the controller may run in this process: not when Ray Train's state tracking
    is on (`RAY_TRAIN_ENABLE_STATE_TRACKING`: its callback records the controller's actor
    ID, which only an actor has)."""
    return not env_bool(RAY_TRAIN_ENABLE_STATE_TRACKING, False)


def run_controller(controller_init_kwargs: dict):
    """Ray Train's `_initialize_and_run_controller` (ray 2.60) with the controller in this
    process rather than in an actor: no process to start, and none that imports Ray Train
    and the backend while the training workers wait for it. It runs in a thread of its own
    (`ControllerThread`, driver/raytrain/controller_thread.py) while this thread waits, so that a
    signal handler's exception (Ctrl-C, a stop signal during start-up) is raised here, in a
    wait, never in the middle of one of the controller's Ray calls; the controller then
    stops (`stop`) before the exception goes on. Its log lines go to the driver's own
    `ray.train` logger rather than to a log file of its own (Ray Train's structured
    controller log would configure this process's logging). It reads the variables Ray Train
    would hand an actor (`get_env_vars_to_propagate`) from this process's environment, where
    Ray Train takes them from. Ray Train's synchronization actor is created only if someone
    calls it (driver/raytrain/lazy_sync.py)."""
    before = os.environ.get(CONTROLLER_LOG_ENV)
    os.environ[CONTROLLER_LOG_ENV] = "0"  # read once, as the controller is made
    try:
        controller = LocalController(**controller_init_kwargs)
    finally:
        if before is None:
            del os.environ[CONTROLLER_LOG_ENV]
        else:
            os.environ[CONTROLLER_LOG_ENV] = before
    thread = ControllerThread(controller)
    restore = lazy_sync.install()  # Ray Train's barrier actor only if anyone calls it
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.5)  # a signal's handler runs, and may raise, in this wait
    except BaseException:
        thread.cancel(STOP_TIMEOUT_S)
        raise
    finally:
        if not thread.is_alive():  # a controller still stopping keeps the stand-in's shutdown
            restore()
    if thread.error is not None:
        raise thread.error
    return controller.get_result()
