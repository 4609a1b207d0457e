"""The Ray Train scaling policy of an embedded (local) run: Ray Train's fixed-size policy
without its AutoscalingCoordinator.

Ray Train's `FixedScalingPolicy` starts an AutoscalingCoordinator actor (a process of its
own, which imports Ray Data) after the controller starts, and keeps asking it for the
workers' resources so that an autoscaling cluster grows to fit them. An embedded Ray is one
machine that never grows: the actor would only take CPU from the workers while they start.
`lean_policy(policy)` returns the same policy without it; any other policy (elastic
training decides from the coordinator's answers) is returned as it is.

This module imports Ray Train: import it only when building a trainer (driver/embedded.py).
"""

from __future__ import annotations

import threading

import ray
from ray._common.constants import RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR
from ray.train.v2._internal.constants import (
    DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
    get_env_vars_to_propagate,
)
from ray.train.v2._internal.execution.controller import TrainController
from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy


class LocalFixedScalingPolicy(FixedScalingPolicy):
    """`FixedScalingPolicy` that asks no AutoscalingCoordinator for resources."""

    def after_controller_start(self, train_run_context) -> None:
        self._requester_id = f"train-{train_run_context.run_id}"

    def _maybe_send_resource_request(self) -> None:
        pass

    def _send_resource_request(self) -> None:
        pass

    def _cancel_resource_request(self) -> None:
        pass


def lean_policy(policy):
    """The policy an embedded run's controller gets: a fixed-size one without the
    coordinator, or `policy` itself when it is not exactly Ray Train's fixed policy."""
    if type(policy) is not FixedScalingPolicy:
        return policy
    return LocalFixedScalingPolicy(scaling_config=policy.scaling_config)


def lean_kwargs(controller_init_kwargs: dict) -> dict:
    """The controller's arguments with `lean_policy` applied to its scaling policy."""
    kwargs = dict(controller_init_kwargs)
    if kwargs.get("scaling_policy") is not None:
        kwargs["scaling_policy"] = lean_policy(kwargs["scaling_policy"])
    return kwargs


def controller_env() -> dict[str, str]:
    """The variables Ray Train hands its controller in a runtime environment."""
    env_vars = get_env_vars_to_propagate()
    env_vars.setdefault(
        RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR, DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE
    )
    return env_vars


def env_inherited(started: dict[str, str] | None) -> bool:
    """Whether every variable of `controller_env()` already has its value in the
    environment the embedded Ray started with (`started`; None: not started here)."""
    return started is not None and all(
        started.get(key) == value for key, value in controller_env().items()
    )


def run_controller(trainer, controller_init_kwargs: dict):
    """Ray Train's `_initialize_and_run_controller` (ray 2.60) without the runtime
    environment: with one, Ray starts the controller in a new process; without, it goes to
    one of the idle worker processes Ray started with itself (one per CPU). Call it only
    when `env_inherited`: the variables then reach the controller all the same."""
    controller_cls = ray.remote(
        num_cpus=0,
        label_selector={ray._raylet.RAY_NODE_ID_KEY: ray.get_runtime_context().get_node_id()},
    )(TrainController)
    controller = controller_cls.remote(**controller_init_kwargs)
    if threading.current_thread() is threading.main_thread():
        trainer._register_sigint_handler(controller)
    ray.get(controller.run.remote())
    return ray.get(controller.get_result.remote())
