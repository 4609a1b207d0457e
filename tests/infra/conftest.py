"""Shared fixtures: the infra program run once per example cluster under Pulumi's mocks."""

from __future__ import annotations

import pytest

from catalog import load_cluster
from infra.mocks import ProgramRun, run

CLUSTERS = ["mega-euw4", "ultra-usc1"]
NODE_POOL = "gcp:container/nodePool:NodePool"


@pytest.fixture(scope="session")
def programs() -> dict[str, ProgramRun]:
    """One program run per example cluster, shared by every test of the session."""
    return {name: run(name) for name in CLUSTERS}


@pytest.fixture(params=CLUSTERS)
def cluster_name(request) -> str:
    return request.param


@pytest.fixture
def program(programs, cluster_name) -> ProgramRun:
    return programs[cluster_name]


@pytest.fixture
def spec(cluster_name):
    return load_cluster(cluster_name)


def pools(program: ProgramRun) -> dict[str, dict]:
    """Node pool inputs by GKE pool name."""
    return {r.inputs["name"]: r.inputs for r in program.of_type(NODE_POOL)}
