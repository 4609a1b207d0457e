"""Fixtures of the DiLoCo tests: Curve keys, an in-process synchronizer, learner threads."""

from __future__ import annotations

import threading

import pytest
import torch

from driver.diloco import keys
from driver.diloco.learner import Learner, LearnerConfig
from driver.diloco.link import Server
from driver.diloco.synchronizer import OuterConfig, Synchronizer

LEARNERS = ["a", "b", "c"]


@pytest.fixture(scope="session")
def keys_dir(tmp_path_factory):
    return str(keys.generate(tmp_path_factory.mktemp("keys"), LEARNERS))


class SyncThread:
    """A Synchronizer serving in a thread of the test process."""

    def __init__(self, keys_dir: str, state_dir: str, cfg: OuterConfig):
        self.server = Server("tcp://127.0.0.1:*", keys_dir)
        self.sync = Synchronizer(self.server, state_dir, cfg)
        self.thread = threading.Thread(target=self.sync.serve, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return self.server.address

    def close(self) -> None:
        self.sync.stop()
        self.thread.join(10)
        self.server.close(0)


@pytest.fixture
def sync_thread(keys_dir, tmp_path):
    made = []

    def start(state: str = "state", **cfg) -> SyncThread:
        made.append(SyncThread(keys_dir, str(tmp_path / state), OuterConfig(**cfg)))
        return made[-1]

    yield start
    for s in made:
        s.close()


def linear(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


def learner(address: str, keys_dir: str, name: str, **cfg) -> Learner:
    cfg = {"sync_every": 1, "compression": "fp32", "barrier_timeout_s": 20.0,
           "join_timeout_s": 20.0, **cfg}  # fmt: skip
    return Learner(LearnerConfig(address, name, keys_dir, **cfg))


def in_threads(*calls) -> None:
    """Run the calls at once (learners blocking in barrier mode) and re-raise failures."""
    errors = []

    def run(call):
        try:
            call()
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
