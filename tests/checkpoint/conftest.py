"""Shared fixtures of the checkpoint tests."""

from __future__ import annotations

import logging

import pytest
import torch

from driver.checkpoint import Checkpointer


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "ckpt")


@pytest.fixture
def checkpointers():
    """Build Checkpointers that are closed at the end of the test."""
    made: list[Checkpointer] = []

    def make(*args, **kwargs) -> Checkpointer:
        ckpt = Checkpointer(*args, **kwargs)
        made.append(ckpt)
        return ckpt

    yield make
    for ckpt in made:
        ckpt.close()


@pytest.fixture(autouse=True)
def _own_checkpoint_key(tmp_path_factory, monkeypatch):
    """Each test's local checkpoint key lives in a folder of its own (not ~/.config)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.delenv("REVE_CHECKPOINT_KEY", raising=False)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.use_deterministic_algorithms(True)
    logging.getLogger("driver.checkpoint").setLevel(logging.INFO)
    yield
    torch.use_deterministic_algorithms(False)


def pytest_collection_modifyitems(items):
    # DCP warns on every single-process save/load; these tests do that on purpose.
    quiet = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
    for item in items:
        if "tests/checkpoint" in str(item.path):
            item.add_marker(quiet)
