"""Worker-group restarts: Ray Train's FailureConfig from the checkpoint config.

Ray Train restarts a failed worker group up to `checkpoint.max_failures` times; each new
group's workers build their Checkpointer with `resume="auto"` and so start from the newest
committed checkpoint of the run (staged or partial ones are never used).
"""

from __future__ import annotations

from driver.checkpoint.config import CheckpointConfig


def failure_config(config: CheckpointConfig):
    """`ray.train.FailureConfig` allowing `config.max_failures` worker-group restarts."""
    import ray.train

    return ray.train.FailureConfig(max_failures=config.max_failures)
