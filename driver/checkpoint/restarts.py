"""Worker-group restarts: Ray Train's FailureConfig from the checkpoint config.

Ray Train restarts a failed worker group up to `checkpoint.max_failures` times when
periodic checkpoints are on (without them there is nothing to restart from: 0). The
workers of a restarted group resume from the newest committed checkpoint of the run
(`driver.checkpoint.session`); staged or partial ones are never used. Under torchft
(`ft.enabled`, driver/ft/launch.py) Ray Train replaces only a failed replica group, which
heals from a live group and reads the checkpoint only when no group is ahead.
"""

from __future__ import annotations

from driver.config.checkpoint import CheckpointConfig


def allowed_restarts(config: CheckpointConfig) -> int:
    """`max_failures` with periodic checkpoints, else 0."""
    return config.max_failures if config.interval_steps > 0 else 0


def failure_config(config: CheckpointConfig):
    """`ray.train.FailureConfig` allowing `allowed_restarts(config)` worker-group restarts."""
    import ray.train

    return ray.train.FailureConfig(max_failures=allowed_restarts(config))
