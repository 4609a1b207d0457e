"""Kill the Warden worker (a `warden worker` subprocess, SIGKILL) at random points ten times.

The worker and the test share an on-disk fake cluster; every side effect is counted there.
Every workflow must complete with its expected outcome, and no node may be cordoned,
drained or rebooted twice.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import yaml
from temporalio.client import Client

from catalog import labels
from warden.fakefleet import FakeCluster
from warden.model import AMBIGUOUS, DEFINITE, NodeInput, Timings, node_workflow_id
from warden.workflows import NodeWorkflow

KILLS = 10
TIMINGS = Timings(
    activity_timeout_s=2,
    retry_initial_s=0.2,
    poll_s=0.2,
    check_timeout_s=60,
    drain_grace_s=1.0,
    reboot_timeout_s=60,
    workflow_task_timeout_s=2,
)


def write_config(tmp_path, address: str, queue: str) -> str:
    config = {
        "cluster": "ultra-usc1",
        "temporal": {"address": address, "task_queue": queue},
        "jobs": {"check_image": "us-docker.pkg.dev/reve-train-ultra/training/runner:test"},
        "telemetry_path": str(tmp_path / "actions.jsonl"),
        "timings": vars(TIMINGS),
    }
    path = tmp_path / "warden.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def start_worker(config: str, state: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "warden.cli", "worker", "--config", config, "--fake", state]
    return subprocess.Popen([*cmd, "--no-sweep"], stdout=subprocess.DEVNULL, start_new_session=True)


def seed(fleet: FakeCluster) -> dict[str, tuple[str, str]]:
    """Twelve nodes, two of each case: node -> (severity, expected outcome)."""
    plan = {}
    for k in range(2):
        n = [fleet.node_name(6 * k + i) for i in range(6)]
        fleet.add_pod(
            f"scratch-{k}", "research", n[3], priority=labels.PRIORITY_PREEMPTIBLE, run=f"s{k}"
        )
        fleet.add_pod(f"train-{k}", "research", n[5], priority=labels.PRIORITY_HIGH, run=f"big{k}")
        fleet.set_outcome(n[4], "check", "failed")
        plan |= {
            n[0]: (DEFINITE, "uncordoned"),
            n[1]: (DEFINITE, "uncordoned"),
            n[2]: (DEFINITE, "uncordoned"),
            n[3]: (DEFINITE, "uncordoned"),  # drains the preemptible job first
            n[4]: (AMBIGUOUS, "uncordoned"),  # node check fails -> cordon -> repair
            n[5]: (DEFINITE, "busy"),
        }
    return plan


def effects(fleet: FakeCluster) -> int:
    return sum(1 for _, kind, _ in fleet.log() if kind != "event")


async def progress(fleet: FakeCluster, more: int, timeout_s: float = 30.0) -> None:
    """Wait until `more` side effects happened (or the timeout passed)."""
    target, deadline = effects(fleet) + more, time.monotonic() + timeout_s
    while effects(fleet) < target and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def crash_and_finish(address, queue, plan, config, state, fleet):
    client = await Client.connect(address)
    handles = [
        await client.start_workflow(
            NodeWorkflow.run,
            NodeInput(node, "respond", TIMINGS, severity, "injected fault"),
            id=node_workflow_id(node),
            task_queue=queue,
            task_timeout=timedelta(seconds=TIMINGS.workflow_task_timeout_s),
        )
        for node, (severity, _) in plan.items()
    ]
    rng = random.Random(9)
    kills = []
    for _ in range(KILLS):
        worker = start_worker(config, state)
        # A random point: after 1 or 2 more side effects, plus up to the fake's latency, so
        # some kills land between a side effect and its activity's completion.
        await progress(fleet, rng.randint(1, 3))
        await asyncio.sleep(rng.uniform(0.0, 0.4))
        os.killpg(worker.pid, signal.SIGKILL)
        kills.append(time.time())
        worker.wait()
    worker = start_worker(config, state)
    try:
        return {h.id: await asyncio.wait_for(h.result(), 240) for h in handles}, kills
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


def test_worker_killed_ten_times_every_workflow_completes_without_repeating_actions(
    tmp_path, temporal_address
):
    state = str(tmp_path / "fleet.json")
    prefix = f"k{uuid.uuid4().hex[:6]}"
    fleet = FakeCluster.create(
        state, nodes=12, latency_s=0.3, reboot_s=1.0, job_s=0.5, prefix=prefix
    )
    plan = seed(fleet)
    queue = f"warden-crash-{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path, temporal_address, queue)
    started = time.monotonic()
    run = crash_and_finish(temporal_address, queue, plan, config, state, fleet)
    results, kills = asyncio.run(run)
    print(f"10 kills, all workflows done in {time.monotonic() - started:.1f}s")
    last_effect = max(t for t, kind, _ in fleet.log() if kind != "event")
    assert all(kill < last_effect for kill in kills)  # every kill hit work in progress

    outcomes = {node: results[node_workflow_id(node)].outcome for node in plan}
    assert outcomes == {node: outcome for node, (_, outcome) in plan.items()}
    repaired = [node for node, (_, outcome) in plan.items() if outcome == "uncordoned"]
    assert fleet.counts("cordon") == {node: 1 for node in plan}
    for node in plan:
        assert fleet.node(node)["metadata"]["annotations"][labels.WARDEN_CORDONS] == "1"
    assert fleet.counts("reboot") == {node: 1 for node in repaired}
    assert fleet.counts("uncordon") == {node: 1 for node in repaired}
    assert fleet.counts("evict") == {"research/scratch-0": 1, "research/scratch-1": 1}
    assert fleet.counts("repair") == {}
    for node in [n for n, (_, o) in plan.items() if o == "busy"]:
        assert fleet.node(node)["spec"]["unschedulable"] is True
    assert fleet.pods() == ["research/train-0", "research/train-1"]
