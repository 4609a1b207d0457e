"""What the driver trims from Ray Train's trainer, for every run, embedded or in a cluster:
default controller callbacks it does not use, the AutoscalingCoordinator of Ray Train's
fixed-size scaling policy, and the controller's own actor.

- `lean_trainer(base)`: Ray Train's trainer `base` with its controller in the driver's
  process rather than in an actor (driver/raytrain/controller.py; not with Ray Train's
  state tracking on, whose callback needs the actor), without the callbacks
  `unused_callbacks` names, and with `lean_policy`'s scaling policy. The callbacks: the
  dataset callback (its DatasetManager actor serves Ray Data shards; no run passes Ray
  Train a dataset, the driver feeds its own data) and, with the controller in the driver's
  process, the placement-group cleaner (an actor asking the GCS every second whether the
  controller's actor is alive, to free the workers' placement group if it died: there is
  no such actor, and a placement group lives as long as the driver's job that made it).
  Each actor is a process that would start, and import Ray Train or Ray Data, while the
  training workers start; the controller's actor came first, before the workers were asked
  for.
- `lean_policy(policy)`: Ray Train's `FixedScalingPolicy` starts an AutoscalingCoordinator
  actor (a process of its own, which imports Ray Data) after the controller starts, and
  keeps asking it for the workers' resources so that an autoscaling cluster grows to fit
  them. Nothing reads those requests where the driver runs: an embedded Ray is one machine,
  and the RayCluster that `runner` renders has KubeRay's in-tree autoscaling off
  (runner/templates/_raycluster_spec.yaml.j2); where a Ray autoscaler does run, the
  workers' pending placement group is itself the demand it reads. The actor would only
  take CPU while the workers start; this returns the same policy without it. Any other
  policy (elastic training decides from the coordinator's answers) is returned as it is.

Import this module only when building a trainer: it imports Ray Train.
"""

from __future__ import annotations

from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy

from driver.raytrain import controller

UNUSED = ("DatasetsCallback",)
"""Ray Train controller callbacks no run uses: Ray Train's own classes (defined under
`ray.train`) of these names."""
UNUSED_IN_PROCESS = ("PlacementGroupCleanerCallback",)
"""And those a run whose controller is in the driver's process goes without as well."""


def unused_callbacks(in_process: bool) -> tuple[str, ...]:
    """The names of Ray Train's callbacks a run goes without (`UNUSED`, `UNUSED_IN_PROCESS`)."""
    return UNUSED + (UNUSED_IN_PROCESS if in_process else ())


def keep_callback(callback: object, in_process: bool) -> bool:
    """Whether a run (its controller in the driver's process or not) keeps this Ray Train
    default callback."""
    kind = type(callback)
    return not (
        kind.__module__.startswith("ray.train.") and kind.__name__ in unused_callbacks(in_process)
    )


def lean_trainer(base: type) -> type:
    """A subclass of Ray Train's trainer `base` with the controller in this process
    (`controller.in_process_ok`), without the callbacks `unused_callbacks` names, and with
    the lean scaling policy.

    Ray Train builds its default callbacks in `_create_default_callbacks` and passes the
    scaling policy to `_initialize_and_run_controller` (ray 2.60, pinned in pyproject.toml);
    if a later Ray renames either, the trainer keeps Ray's defaults (a test fails, so the
    upgrade gets looked at)."""

    class LeanTrainer(base):
        def _create_default_callbacks(self):
            in_process = controller.in_process_ok()
            callbacks = super()._create_default_callbacks()
            return [cb for cb in callbacks if keep_callback(cb, in_process)]

        def _initialize_and_run_controller(self, **controller_init_kwargs):
            kwargs = lean_kwargs(controller_init_kwargs)
            if controller.in_process_ok():
                return controller.run_controller(kwargs)
            return super()._initialize_and_run_controller(**kwargs)

    return LeanTrainer


class LeanFixedScalingPolicy(FixedScalingPolicy):
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
    """The policy a run's controller gets: a fixed-size one without the
    coordinator, or `policy` itself when it is not exactly Ray Train's fixed policy."""
    if type(policy) is not FixedScalingPolicy:
        return policy
    return LeanFixedScalingPolicy(scaling_config=policy.scaling_config)


def lean_kwargs(controller_init_kwargs: dict) -> dict:
    """The controller's arguments with `lean_policy` applied to its scaling policy."""
    kwargs = dict(controller_init_kwargs)
    if kwargs.get("scaling_policy") is not None:
        kwargs["scaling_policy"] = lean_policy(kwargs["scaling_policy"])
    return kwargs
