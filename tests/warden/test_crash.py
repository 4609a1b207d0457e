"""Kill the Warden worker (a `warden worker` subprocess, SIGKILL) at random points ten times.

The worker and the test share an on-disk fake cluster; every side effect is counted there.
Each worker is killed after one or two side effects (at random), within the fake's latency
after the last one: the killed activity has acted but not yet completed, so its
retry on the next worker must see the effect and not repeat it. Every workflow must
complete with its expected outcome, no node may be cordoned, drained or rebooted twice, and
the histories must show retried side-effecting activities (the kills really hit them).

The next worker process is started ahead with its modules imported and connects when told,
so the test waits for Temporal's timeouts, not for Python start-up.
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
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from catalog import labels
from warden.fakefleet import FakeCluster
from warden.model import AMBIGUOUS, DEFINITE, NodeInput, Timings, node_workflow_id
from warden.workflows import NodeWorkflow

KILLS = 10
LATENCY_S = 0.3
"""the fake's pause after each side effect: the window in which a kill lands mid-activity."""
TIMINGS = Timings(
    activity_timeout_s=1,
    retry_initial_s=0.1,
    poll_s=0.1,
    check_timeout_s=60,
    drain_grace_s=0.5,
    reboot_timeout_s=60,
    workflow_task_timeout_s=1,
    busy_recheck_s=0.2,
)
SIDE_EFFECTS = {"cordon", "start_job", "drain", "reboot", "uncordon", "escalate"}
PRELOADED = (
    "import sys, warden.cli, warden.worker, catalog; sys.stdin.readline(); "
    "warden.cli.main(sys.argv[1:])"
)


def write_config(tmp_path, address: str, queue: str) -> str:
    config = {
        "cluster": "ultra-usc1",
        "temporal": {"address": address, "task_queue": queue},
        "jobs": {"check_image": "us-docker.pkg.dev/reve-train-ultra/training/runner:test"},
        "telemetry_path": str(tmp_path / "actions.jsonl"),
        "timings": vars(TIMINGS),
        "watch": False,  # the test starts the node workflows itself (and --no-sweep)
    }
    path = tmp_path / "warden.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


class Worker:
    """`warden worker --fake STATE --no-sweep`, imported ahead, connecting on `go()`."""

    def __init__(self, config: str, state: str):
        args = ["worker", "--config", config, "--fake", state, "--no-sweep"]
        self.process = subprocess.Popen(
            [sys.executable, "-c", PRELOADED, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    def go(self) -> None:
        self.process.stdin.write(b"go\n")
        self.process.stdin.flush()

    def kill(self, signum: int = signal.SIGKILL) -> int:
        os.killpg(self.process.pid, signum)
        return self.process.wait(timeout=60)


def seed(fleet: FakeCluster) -> dict[str, tuple[str, str]]:
    """Six nodes, one per case: node -> (severity, expected outcome)."""
    n = [fleet.node_name(i) for i in range(6)]
    fleet.add_pod("scratch", "research", n[2], priority=labels.PRIORITY_PREEMPTIBLE, run="s")
    fleet.add_pod("train", "research", n[5], priority=labels.PRIORITY_HIGH, run="big")
    fleet.set_outcome(n[3], "check", "failed")
    return {
        n[0]: (DEFINITE, "uncordoned"),
        n[1]: (DEFINITE, "uncordoned"),
        n[2]: (DEFINITE, "uncordoned"),  # drains the preemptible job first
        n[3]: (AMBIGUOUS, "uncordoned"),  # node check fails -> cordon -> repair
        n[4]: (AMBIGUOUS, "cleared"),  # node check passes
        n[5]: (DEFINITE, "busy"),  # a high-priority job: never evicted, never rebooted
    }


EXPECTED_EFFECTS = 5 + 4 + 6 + 4 + 1
"""cordons, reboots, Jobs (2 checks, 4 diags), uncordons, evictions of `seed`'s plan."""


def effects(fleet: FakeCluster) -> int:
    return sum(1 for _, kind, _ in fleet.log() if kind != "event")


async def reach(fleet: FakeCluster, target: int, timeout_s: float = 30.0) -> None:
    """Wait until `target` side effects happened (or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    while effects(fleet) < target and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


async def retried_side_effects(handles) -> list[str]:
    """Side-effecting activities that ran more than one attempt, from the histories."""
    retried = []
    for handle in handles:
        names = {}
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                names[event.event_id] = attrs.activity_type.name
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attrs = event.activity_task_started_event_attributes
                name = names[attrs.scheduled_event_id]
                if attrs.attempt > 1 and name in SIDE_EFFECTS:
                    retried.append(name)
    return retried


async def results_or_describe(handles, fleet: FakeCluster, timeout_s: float) -> dict:
    """Every workflow's result; if one has none within `timeout_s`, fail with where each
    unfinished workflow stands and the fleet's last side effects."""
    try:
        return await asyncio.wait_for(_results(handles), timeout_s)
    except TimeoutError:
        pass
    lines = []
    for handle in handles:
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.COMPLETED:
            try:
                phase = await asyncio.wait_for(handle.query(NodeWorkflow.current_phase), 10)
            except Exception as err:  # noqa: BLE001 (a description, whatever it is)
                phase = f"no phase ({type(err).__name__})"
            lines.append(f"{handle.id}: {described.status.name}, {phase}")
    tail = [f"{kind} {what}" for _, kind, what in fleet.log()[-12:]]
    raise AssertionError(
        f"not completed within {timeout_s:.0f} s:\n"
        + "\n".join(lines)
        + "\nlast: "
        + "; ".join(tail)
    )


async def _results(handles) -> dict:
    return {h.id: await h.result() for h in handles}


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
    kills, upcoming = [], Worker(config, state)
    for k in range(KILLS):
        worker, upcoming = upcoming, Worker(config, state)
        worker.go()
        # one or two side effects by this worker, leaving at least one for each later kill
        room = EXPECTED_EFFECTS - (KILLS - k)
        await reach(fleet, min(effects(fleet) + rng.randint(1, 2), room))
        await asyncio.sleep(rng.uniform(0.0, LATENCY_S / 2))
        worker.kill()
        kills.append(time.time())
    upcoming.go()
    try:
        results = await results_or_describe(handles, fleet, 240)
    finally:
        stopped = upcoming.kill(signal.SIGTERM)  # as Kubernetes stops a pod: a clean exit
    assert stopped == 0
    return results, kills, await retried_side_effects(handles)


def test_worker_killed_ten_times_every_workflow_completes_without_repeating_actions(
    tmp_path, temporal_address
):
    state = str(tmp_path / "fleet.json")
    prefix = f"k{uuid.uuid4().hex[:6]}"
    fleet = FakeCluster.create(
        state, nodes=6, latency_s=LATENCY_S, reboot_s=0.3, job_s=0.2, prefix=prefix
    )
    plan = seed(fleet)
    queue = f"warden-crash-{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path, temporal_address, queue)
    started = time.monotonic()
    run = crash_and_finish(temporal_address, queue, plan, config, state, fleet)
    results, kills, retried = asyncio.run(run)
    elapsed = time.monotonic() - started
    print(f"{KILLS} kills, retried side effects {retried}, done in {elapsed:.1f}s")
    assert len(kills) == KILLS
    last_effect = max(t for t, kind, _ in fleet.log() if kind != "event")
    assert all(kill < last_effect for kill in kills)  # every kill hit work in progress
    assert retried, "no kill landed inside a side-effecting activity"
    assert effects(fleet) == EXPECTED_EFFECTS

    outcomes = {node: results[node_workflow_id(node)].outcome for node in plan}
    assert outcomes == {node: outcome for node, (_, outcome) in plan.items()}
    repaired = [node for node, (_, outcome) in plan.items() if outcome == "uncordoned"]
    cordoned = [node for node, (_, outcome) in plan.items() if outcome != "cleared"]
    assert fleet.counts("cordon") == {node: 1 for node in cordoned}
    for node in cordoned:
        assert fleet.node(node)["metadata"]["annotations"][labels.WARDEN_CORDONS] == "1"
    assert fleet.counts("reboot") == {node: 1 for node in repaired}
    assert fleet.counts("uncordon") == {node: 1 for node in repaired}
    assert fleet.counts("evict") == {"research/scratch": 1}
    assert len(fleet.counts("job")) == 6 and set(fleet.counts("job").values()) == {1}
    assert fleet.counts("repair") == {}
    busy = [node for node, (_, outcome) in plan.items() if outcome == "busy"]
    assert all(fleet.node(node)["spec"]["unschedulable"] is True for node in busy)
    assert fleet.pods() == ["research/train"]
