"""Shared fixtures of the driver tests: config paths and one embedded Ray per module."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY_LM = str(ROOT / "runs/train/tiny-lm.yaml")
TINY_DIT = str(ROOT / "runs/train/tiny-dit.yaml")


@pytest.fixture(scope="module")
def ray_local():
    """One embedded Ray for every test of a module (start-up is the slow part)."""
    import os

    import ray

    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    ray.init(num_cpus=2, include_dashboard=True, log_to_driver=False, logging_level="WARNING")
    yield ray
    ray.shutdown()
