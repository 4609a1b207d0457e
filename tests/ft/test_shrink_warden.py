"""A shrink request from training reaches Warden's ShrinkWorkflow (real Temporal dev server,
fake Kubernetes) with the RayCluster, the worker-group name the renderer writes (read from
a rendered run under apps/) and the counts, through warden.client's starter
(`start_shrink_sync`: its own connection, as a training worker's shrink thread makes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from driver.ft.shrink import ShrinkRequest, ShrinkTarget, warden_shrink
from tests.warden.conftest import fleet, harness, temporal_address  # noqa: F401 (fixtures)
from warden.client import start_shrink_sync

APP = Path(__file__).resolve().parents[2] / "apps/ultra-usc1/research/tiny-lm.yaml"


def rendered_worker_group() -> tuple[str, str, str, int]:
    """(namespace, name, groupName, replicas) of the rendered RayJob's worker group."""
    job = next(d for d in yaml.safe_load_all(APP.read_text()) if d and d["kind"] == "RayJob")
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    return (
        job["metadata"]["namespace"],
        job["metadata"]["name"],
        group["groupName"],
        group["replicas"],
    )


def test_lowest_live_group_shrinks_the_worker_group_through_warden(harness):  # noqa: F811
    namespace, name, group, replicas = rendered_worker_group()
    cluster = harness.fleet
    cluster.add_raycluster(namespace, name, {group: replicas, "aux": 1})
    target = ShrinkTarget(namespace, name, group, workers_per_group=1, workers_per_pod=1)

    async def body(h):
        def start(**fields):  # what FtReplica's shrink thread calls (driver.ft.target)
            return start_shrink_sync(h.address, **fields, task_queue=h.queue)

        shrink = warden_shrink(target, start)
        await asyncio.to_thread(shrink, ShrinkRequest(replicas, replicas - 1))
        await asyncio.to_thread(shrink, ShrinkRequest(replicas, replicas - 1))  # a retry

    harness.run(body)
    groups = cluster.kube.get_raycluster(namespace, name)["spec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["replicas"]) for g in groups] == [(group, replicas - 1), ("aux", 1)]
    assert cluster.counts("shrink") == {f"{namespace}/{name}": 1}
