"""What the driver trims when it starts its own (embedded) Ray for a local run.

An embedded Ray serves one training run on one machine whose CPUs the training workers
need: every Ray process wakes up periodically even when idle, and on a machine the workers
fill, each wake-up takes CPU from training. A Ray cluster (a RayJob) keeps Ray's defaults.

- `LOCAL_ENV`: no preemption watcher, no Prometheus metrics, resource reports and task
  events at a slower pace than a shared cluster needs. A variable already set wins.
- `lean_trainer(TorchTrainer)`: a TorchTrainer without two controller callbacks this run
  does not use: the dataset callback (its DatasetManager actor serves Ray Data shards; the
  driver feeds its own data) and the placement-group cleaner (an actor that asks the GCS
  every second whether the controller is alive, to free the workers' placement group if it
  died; an embedded Ray ends with the driver, and everything it holds with it).
"""

from __future__ import annotations

LOCAL_ENV = {
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_METRICS_ENABLED": "0",
    "RAY_enable_metrics_collection": "0",
    "RAY_event_stats": "0",
    "RAY_raylet_report_resources_period_milliseconds": "1000",
    "RAY_task_events_report_interval_ms": "5000",
}

UNUSED_LOCALLY = ("DatasetsCallback", "PlacementGroupCleanerCallback")
"""Ray Train controller callbacks an embedded run goes without: Ray Train's own classes
(defined under `ray.train`) of these names."""


def keep_callback(callback: object) -> bool:
    """Whether an embedded run keeps this Ray Train default callback."""
    kind = type(callback)
    return not (kind.__module__.startswith("ray.train.") and kind.__name__ in UNUSED_LOCALLY)


def lean_trainer(base: type) -> type:
    """A subclass of Ray Train's TorchTrainer `base` without the callbacks in UNUSED_LOCALLY.

    Ray Train builds its default callbacks in `_create_default_callbacks` (ray 2.60, pinned
    in pyproject.toml); if a later Ray renames it, the trainer keeps Ray's defaults (a
    test fails, so the upgrade gets looked at)."""

    class LeanTorchTrainer(base):
        def _create_default_callbacks(self):
            return [cb for cb in super()._create_default_callbacks() if keep_callback(cb)]

    return LeanTorchTrainer
