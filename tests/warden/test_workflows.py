"""Node workflows on the real Temporal dev server against the fake cluster."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from catalog import labels
from warden import annotations as ann
from warden.model import (
    AMBIGUOUS,
    DEFINITE,
    NodeInput,
    NodeResult,
    SweepInput,
    node_workflow_id,
)
from warden.workflows import NodeWorkflow, SweepWorkflow


async def remediate(h, node: str, severity=DEFINITE, reason="XID 79", mode="respond") -> NodeResult:
    return await h.client.execute_workflow(
        NodeWorkflow.run,
        NodeInput(node, mode, h.timings, severity, reason),
        id=node_workflow_id(node),
        task_queue=h.queue,
        task_timeout=timedelta(seconds=h.timings.workflow_task_timeout_s),
        execution_timeout=timedelta(seconds=120),
    )


def test_definite_fault_on_busy_node_cordons_with_annotations_and_never_reboots(harness):
    fleet = harness.fleet
    node = fleet.node_name(0)
    fleet.add_pod("train-0", "research", node, priority=labels.PRIORITY_DEFAULT, run="big")
    # a preemptible job beside it is not evicted either: the node cannot be rebooted anyway
    fleet.add_pod("scratch-0", "research", node, priority=labels.PRIORITY_PREEMPTIBLE, run="s")
    result = harness.run(lambda h: remediate(h, node))
    assert result.outcome == "busy"
    have = fleet.node(node)
    assert have["spec"]["unschedulable"] is True
    notes = have["metadata"]["annotations"]
    assert notes[labels.WARDEN_CORDONS] == "1"
    assert notes[labels.WARDEN_REASON] == "XID 79"
    stamp = datetime.fromisoformat(notes[labels.WARDEN_LAST_CORDON])
    assert datetime.now(UTC) - stamp < timedelta(minutes=1)
    assert fleet.counts("cordon") == {node: 1}
    assert fleet.counts("reboot") == {} and fleet.counts("evict") == {}
    assert fleet.pods() == ["research/scratch-0", "research/train-0"]
    assert {e["reason"] for e in fleet.events()} == {"WardenCordon", "WardenBusy"}
    assert [r.action for r in harness.sink.records] == ["cordon", "busy"]


def test_idle_cordoned_node_is_rebooted_stress_tested_and_uncordoned(harness):
    fleet = harness.fleet
    node = fleet.node_name(1)
    boot_before = fleet.node(node)["status"]["nodeInfo"]["bootID"]
    result = harness.run(lambda h: remediate(h, node))
    assert result.outcome == "uncordoned"
    assert result.actions[:2] == ["cordon", "inspect"]
    have = fleet.node(node)
    assert not have["spec"]["unschedulable"]
    assert have["status"]["nodeInfo"]["bootID"] != boot_before
    assert ann.REASON not in have["metadata"]["annotations"]
    assert have["metadata"]["annotations"][labels.WARDEN_CORDONS] == "1"  # kept for escalation
    assert fleet.counts("cordon") == {node: 1}
    assert fleet.counts("reboot") == {node: 1}
    assert fleet.counts("uncordon") == {node: 1}
    kinds = sorted(k.split("/")[1].split("-")[1] for k in fleet.counts("job"))
    assert kinds == ["diag"]
    actions = [r.action for r in harness.sink.records]
    assert actions == ["cordon", "reboot", "diag", "diag-passed", "uncordon"]


@pytest.mark.parametrize(
    ("verdict", "outcome", "cordons"), [("failed", "uncordoned", 1), ("succeeded", "cleared", 0)]
)
def test_ambiguous_fault_runs_the_node_check_and_acts_on_its_verdict(
    harness, verdict, outcome, cordons
):
    fleet = harness.fleet
    node = fleet.node_name(2)
    fleet.set_outcome(node, "check", verdict)
    result = harness.run(lambda h: remediate(h, node, AMBIGUOUS, "120 NVLink errors"))
    assert result.outcome == outcome
    assert result.actions[0] == f"check {verdict}"
    assert sum(fleet.counts("cordon").values()) == cordons
    (job_key,) = [k for k in fleet.counts("job") if "-check-" in k]
    job = fleet.kube.get_job(*job_key.split("/"))
    assert job["spec"]["template"]["spec"]["nodeName"] == node  # runner.nodecheck's Job
    if verdict == "succeeded":
        assert ann.CLEARED in fleet.node(node)["metadata"]["annotations"]
        assert fleet.counts("reboot") == {}


def test_preemptible_single_node_job_is_drained_only_after_the_grace_period(harness):
    fleet = harness.fleet
    harness.timings.drain_grace_s = 1.0
    node, other = fleet.node_name(3), fleet.node_name(0)
    fleet.add_pod(
        "scratch-0",
        "research",
        node,
        priority=labels.PRIORITY_PREEMPTIBLE,
        run="scratch",
        owner=("Job", "scratch"),
    )
    result = harness.run(lambda h: remediate(h, node))
    assert result.outcome == "uncordoned"
    notice = [e for e in fleet.events("WardenDrain-Notice")]
    assert notice and notice[0]["involvedObject"]["kind"] == "Job"  # on the workload
    (notified_at,) = [t for t, kind, what in fleet.log("event") if what == "WardenDrain-Notice"]
    (evicted_at,) = [t for t, kind, what in fleet.log("evict")]
    assert evicted_at - notified_at >= 1.0
    assert fleet.counts("evict") == {"research/scratch-0": 1}
    assert fleet.counts("reboot") == {node: 1}
    assert other not in fleet.counts("cordon")


def test_preemptible_job_spanning_nodes_is_never_evicted(harness):
    fleet = harness.fleet
    node, other = fleet.node_name(0), fleet.node_name(1)
    for i, where in enumerate((node, other)):
        fleet.add_pod(
            f"multi-{i}", "research", where, priority=labels.PRIORITY_PREEMPTIBLE, run="multi"
        )
    result = harness.run(lambda h: remediate(h, node))
    assert result.outcome == "busy"
    assert fleet.counts("evict") == {} and fleet.counts("reboot") == {}


def test_repeated_cordons_escalate_to_gcp(harness):
    fleet = harness.fleet
    node = fleet.node_name(1)
    # two earlier remediations within the window, as their cordons left the node
    an_hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    fleet.kube.patch_node(node, None, {ann.CORDONS: "2", ann.LAST_CORDON: an_hour_ago})
    result = harness.run(lambda h: remediate(h, node))
    assert result.outcome == "escalated" and result.actions == ["cordon", "escalate"]
    notes = fleet.node(node)["metadata"]["annotations"]
    assert notes[labels.WARDEN_CORDONS] == "3"
    assert ann.ESCALATED in notes
    assert fleet.counts("repair") == {node: 1}
    assert fleet.counts("reboot") == {}  # straight to GCP: reboots did not help before
    assert fleet.node(node)["spec"]["unschedulable"] is True  # stays out until GCP repairs it
    escalations = fleet.events("WardenEscalate")
    assert len(escalations) == 1 and "3 cordons within the window" in escalations[0]["message"]


def test_failed_stress_test_escalates(harness):
    fleet = harness.fleet
    node = fleet.node_name(2)
    fleet.set_outcome(node, "diag", "failed")
    result = harness.run(lambda h: remediate(h, node))
    assert result.outcome == "escalated"
    assert fleet.counts("repair") == {node: 1}
    assert fleet.counts("uncordon") == {}
    diag = [k for k in fleet.counts("job") if "-diag-" in k]
    job = fleet.kube.get_job(*diag[0].split("/"))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-1].endswith("dcgmi diag -r 3")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8


def test_a_busy_node_keeps_its_workflow_id_until_the_recheck(harness):
    fleet = harness.fleet
    node = fleet.node_name(0)
    fleet.add_pod("train-0", "research", node, priority=labels.PRIORITY_HIGH, run="big")
    harness.timings.busy_recheck_s = 60

    async def sweep_while_busy(h):
        handle = await h.client.start_workflow(
            NodeWorkflow.run,
            NodeInput(node, "respond", h.timings, DEFINITE, "XID 79"),
            id=node_workflow_id(node),
            task_queue=h.queue,
        )
        while not (await handle.query(NodeWorkflow.current_phase)).startswith("busy"):
            await asyncio.sleep(0.05)
        sweep = await h.client.execute_workflow(
            SweepWorkflow.run,
            SweepInput(h.timings, h.queue, sweeps=1),
            id=f"sweep-{h.queue}",
            task_queue=h.queue,
        )
        await handle.terminate()
        return sweep

    result = harness.run(sweep_while_busy)
    assert (result.started, result.already_running) == (0, 1)  # the sweep left it alone
    assert fleet.counts("cordon") == {node: 1} and fleet.counts("reboot") == {}
