"""Shared fixtures of the data pipeline tests: small datasets, /dev/shm and process checks."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from driver.data.runtime import SHM_PREFIX


class IndexDataset:
    """Sample i is {"id": i, "x": float32[4] filled with i}; optional faults by index."""

    def __init__(self, size: int, corrupt: tuple[int, ...] = ()):
        self.size = size
        self.corrupt = set(corrupt)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict:
        if index in self.corrupt:
            raise ValueError(f"cannot decode record {index}")
        return {"id": index, "x": np.full(4, index, np.float32)}


def ours() -> list[str]:
    return [f for f in os.listdir("/dev/shm") if f.startswith(f"{SHM_PREFIX}{os.getpid()}-")]


@pytest.fixture(autouse=True)
def clean_exit():
    """Every test must leave /dev/shm clean and no worker process behind."""
    yield
    gc_deadline = time.monotonic() + 5
    while mp.active_children() and time.monotonic() < gc_deadline:
        time.sleep(0.05)
    assert ours() == [], "shared memory left in /dev/shm"
    assert mp.active_children() == [], "worker processes left running"


def ids_of(pipeline, steps: int | None = None) -> list[list[int]]:
    """Sample ids of each batch (up to `steps` batches) from the pipeline."""
    out = []
    for batch in pipeline:
        out.append(batch["id"].tolist())
        if steps is not None and len(out) == steps:
            break
    return out
