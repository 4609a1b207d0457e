"""What the driver trims from Ray Train's trainer: default controller callbacks a run does
not use, and the AutoscalingCoordinator of Ray Train's fixed-size scaling policy.

- `lean_trainer(base)`: Ray Train's trainer `base` without the callbacks in
  `UNUSED_LOCALLY` (the dataset callback: its DatasetManager actor serves Ray Data shards,
  and the driver feeds its own data; the placement-group cleaner: an actor that asks the
  GCS every second whether the controller is alive), with `lean_policy`'s scaling policy,
  and with the controller in this process when this process started the Ray it runs on
  (driver/embedded/controller.py). Each actor is a process that would start, and import
  Ray Train or Ray Data, while the training workers start.
- `lean_policy(policy)`: Ray Train's `FixedScalingPolicy` starts an AutoscalingCoordinator
  actor (a process of its own, which imports Ray Data) after the controller starts, and
  keeps asking it for the workers' resources so that an autoscaling cluster grows to fit
  them. On a Ray that never grows, the actor would only take CPU from the workers while
  they start; this returns the same policy without it. Any other policy (elastic training
  decides from the coordinator's answers) is returned as it is.

Import this module only when building a trainer: it imports Ray Train.
"""

from __future__ import annotations

from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy

from driver.embedded.lean import started_here

UNUSED_LOCALLY = ("DatasetsCallback", "PlacementGroupCleanerCallback")
"""Ray Train controller callbacks an embedded run goes without: Ray Train's own classes
(defined under `ray.train`) of these names."""


def keep_callback(callback: object) -> bool:
    """Whether an embedded run keeps this Ray Train default callback."""
    kind = type(callback)
    return not (kind.__module__.startswith("ray.train.") and kind.__name__ in UNUSED_LOCALLY)


def lean_trainer(base: type) -> type:
    """A subclass of Ray Train's trainer `base` without the callbacks in UNUSED_LOCALLY, with
    the lean scaling policy, and with the controller in this process when this process
    started the Ray it runs on (driver/embedded/controller.py).

    Ray Train builds its default callbacks in `_create_default_callbacks` and passes the
    scaling policy to `_initialize_and_run_controller` (ray 2.60, pinned in pyproject.toml);
    if a later Ray renames either, the trainer keeps Ray's defaults (a test fails, so the
    upgrade gets looked at)."""

    class LeanTrainer(base):
        def _create_default_callbacks(self):
            return [cb for cb in super()._create_default_callbacks() if keep_callback(cb)]

        def _initialize_and_run_controller(self, **controller_init_kwargs):
            from driver.embedded import controller as embedded_train

            kwargs = lean_kwargs(controller_init_kwargs)
            if started_here() and embedded_train.in_process_ok():
                return embedded_train.run_controller(kwargs)
            return super()._initialize_and_run_controller(**kwargs)

    return LeanTrainer


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
