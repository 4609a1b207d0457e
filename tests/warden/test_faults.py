"""Warden under faults on the real Temporal dev server: Kubernetes and GCP errors injected
into the fake cluster. Timeouts and 5xx are retried (a bounded number of times) and the
repair completes with every side effect once; 403 and 400 stop at once with a report."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from catalog import labels
from tests.warden.test_workflows import remediate
from warden import annotations as ann
from warden import errors
from warden.cli import run_cli
from warden.fakefleet import FakeCluster
from warden.gcp import Instance
from warden.model import (
    AMBIGUOUS,
    DEFINITE,
    NodeInput,
    SweepInput,
    node_workflow_id,
)
from warden.report import status_lines
from warden.workflows import NodeWorkflow, SweepWorkflow


def faults(fleet) -> dict[str, int]:
    return fleet.counts("fault")


def test_kubernetes_5xx_timeouts_and_conflicts_are_retried_then_the_repair_completes(harness):
    fleet = harness.fleet
    node = fleet.node_name(0)
    harness.timings.retry_initial_s = 0.05  # faults one after another: short backoff
    fleet.inject("kube", "get_node", 503, key=node)
    fleet.inject("kube", "patch_node", "timeout", key=node)  # no answer, nothing done
    fleet.inject("kube", "patch_node", "timeout", key=node, after=True)  # done, answer lost
    fleet.inject("kube", "patch_node", 409, key=node)  # changed since read: read again
    fleet.inject("kube", "list_pods", 500, key=node)
    fleet.inject("kube", "create_job", 502, after=True)  # the Job exists, the answer is lost
    fleet.inject("kube", "get_job", "timeout")
    result = harness.run(lambda h: remediate(h, node))
    assert result.outcome == "uncordoned", result
    assert faults(fleet) == {
        "kube.get_node 503": 1, "kube.patch_node timeout": 2, "kube.patch_node 409": 1,
        "kube.list_pods 500": 1, "kube.create_job 502": 1, "kube.get_job timeout": 1,
    }  # fmt: skip
    assert fleet.counts("cordon") == {node: 1}  # the lost answer's retry saw its own cordon
    assert fleet.counts("reboot") == {node: 1} and fleet.counts("uncordon") == {node: 1}
    assert len(fleet.counts("job")) == 1
    assert [r.action for r in harness.sink.records] == [
        "cordon", "reboot", "diag", "diag-passed", "uncordon",
    ]  # fmt: skip


def test_gcp_5xx_and_a_lost_answer_are_retried_and_the_node_reboots_once(harness):
    fleet = harness.fleet
    node = fleet.node_name(1)
    fleet.inject("gcp", "reset", 503, times=2, key=node)
    fleet.inject("gcp", "reset", "timeout", key=node, after=True)  # reset done, answer lost
    result = harness.run(lambda h: remediate(h, node))
    assert result.outcome == "uncordoned"
    assert faults(fleet) == {"gcp.reset 503": 2, "gcp.reset timeout": 1}
    assert fleet.counts("reboot") == {node: 1}  # the same requestId: GCP resets once


async def until_failed(h, node: str) -> tuple[str, object]:
    """The phase while the failed workflow holds the node's ID, then its result."""
    handle = await h.client.start_workflow(
        NodeWorkflow.run,
        NodeInput(node, "respond", h.timings, DEFINITE, "XID 79"),
        id=node_workflow_id(node),
        task_queue=h.queue,
        task_timeout=timedelta(seconds=h.timings.workflow_task_timeout_s),
    )
    phase = ""
    while not phase.startswith("failed"):
        await asyncio.sleep(0.05)
        phase = await handle.query(NodeWorkflow.current_phase)
    return phase, await handle.result()


def test_gcp_403_stops_the_repair_at_once_with_a_report(harness):
    fleet = harness.fleet
    node = fleet.node_name(2)
    harness.timings.failed_recheck_s = 1.0
    fleet.inject("gcp", "reset", 403, times=-1, key=node, detail="compute.instances.reset denied")
    phase, result = harness.run(lambda h: until_failed(h, node))
    assert result.outcome == "failed" and result.node == node
    assert result.detail.startswith(f"reboot: gcp reset {node}: HTTP 403 Forbidden")
    assert "compute.instances.reset denied" in result.detail
    assert phase == f"failed: {result.detail}"  # `warden status` shows it while held
    assert faults(fleet) == {"gcp.reset 403": 1}  # not retried
    assert fleet.counts("reboot") == {}
    have = fleet.node(node)
    assert have["spec"]["unschedulable"] is True  # stays out; the recovery sweep comes back
    assert have["metadata"]["annotations"][ann.REASON] == "XID 79"
    (event,) = fleet.events("WardenFailed")
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == node
    assert "HTTP 403" in event["message"]
    (failed,) = [r for r in harness.sink.records if r.action == "failed"]
    assert (failed.node, failed.detail) == (node, "reboot")
    assert "HTTP 403" in failed.reason
    shown = asyncio.run(status_lines(harness.address, "default", node))
    assert "outcome:  failed" in shown and f"detail:   {result.detail}" in shown


@pytest.mark.parametrize("status", [403, 400])
def test_a_refused_cordon_stops_and_is_recorded_even_without_events(harness, status):
    fleet = harness.fleet
    node = fleet.node_name(3)
    fleet.inject("kube", "patch_node", status, times=-1, key=node)
    fleet.inject("kube", "create_event", 403, times=-1)  # no Event may be written either
    result = harness.run(lambda h: remediate(h, node))
    assert result.outcome == "failed"
    assert result.detail.startswith(f"cordon: kube patch_node {node}: HTTP {status}")
    assert faults(fleet)[f"kube.patch_node {status}"] == 1
    assert fleet.counts("cordon") == {} and fleet.events() == []
    (failed,) = harness.sink.records
    assert (failed.action, failed.node, failed.detail) == ("failed", node, "cordon")


def test_retries_are_bounded_and_then_reported(harness):
    fleet = harness.fleet
    node = fleet.node_name(0)
    harness.timings.retry_max_attempts = 3
    fleet.inject("kube", "get_job", "timeout", times=-1)
    result = harness.run(lambda h: remediate(h, node, AMBIGUOUS, "120 NVLink errors"))
    assert result.outcome == "failed"
    assert result.detail.startswith("job_status: gave up after 3 attempts: kube get_job ")
    assert result.detail.endswith("no answer: timed out")
    assert faults(fleet) == {"kube.get_job timeout": 3}
    assert fleet.counts("cordon") == {}  # an unproven finding is not acted on


def test_a_recovery_of_a_node_no_longer_cordoned_does_nothing(harness):
    fleet = harness.fleet
    node = fleet.node_name(1)  # a sweep saw it cordoned; its repair uncordoned it since
    fleet.add_pod("scratch-0", "research", node, priority=labels.PRIORITY_PREEMPTIBLE, run="s")
    result = harness.run(lambda h: remediate(h, node, mode="recover"))
    assert (result.outcome, result.actions) == ("released", ["inspect"])
    assert fleet.counts("evict") == {} and fleet.counts("reboot") == {}


def test_a_sweep_that_fails_is_recorded_and_the_next_one_runs(harness):
    fleet = harness.fleet
    node = fleet.node_name(2)
    fleet.set_metrics(node, xids=[79])
    fleet.inject("kube", "list_nodes", 403)  # one sweep refused (RBAC being rolled out)

    async def sweeps(h):
        return await h.client.execute_workflow(
            SweepWorkflow.run,
            SweepInput(h.timings, h.queue, sweeps=2),
            id=f"sweep-{h.queue}",
            task_queue=h.queue,
        )

    result = harness.run(sweeps)
    assert (result.sweeps, result.failed, result.started) == (2, 1, 1)
    (failed,) = [r for r in harness.sink.records if r.action == "failed"]
    assert (failed.node, failed.detail) == ("", "detect") and "HTTP 403" in failed.reason


def test_status_shows_the_error_an_activity_is_retrying_on(harness):
    fleet = harness.fleet
    node = fleet.node_name(1)
    fleet.inject("kube", "get_job", 503, times=-1, detail="etcdserver: leader changed")

    async def body(h):
        handle = await h.client.start_workflow(
            NodeWorkflow.run,
            NodeInput(node, "respond", h.timings, AMBIGUOUS, "NVLink"),
            id=node_workflow_id(node),
            task_queue=h.queue,
        )
        shown: list[str] = []
        for _ in range(600):
            shown = await status_lines(h.address, "default", node)
            if any(line.startswith("retrying:") for line in shown):
                break
            await asyncio.sleep(0.05)
        await handle.terminate()
        return shown

    shown = harness.run(body)
    assert "phase:    check" in shown
    assert any(line.startswith("activity: job_status (attempt ") for line in shown)
    (retrying,) = [line for line in shown if line.startswith("retrying:")]
    assert "kube get_job" in retrying and "HTTP 503" in retrying and "leader changed" in retrying


def test_the_cli_injects_api_faults_into_the_on_disk_fake(tmp_path, capsys):
    path = str(tmp_path / "fleet.json")
    assert run_cli(["fake-fleet", path, "--nodes", "2"]) == 0
    fleet = FakeCluster(path)
    node = fleet.node_name(0)
    args = ["inject", path, node, "--api-fault", "gcp.reset=403", "--api-fault"]
    assert run_cli([*args, "kube.get_node=timeout", "--times", "2"]) == 0
    with pytest.raises(errors.Fatal, match="HTTP 403"):
        fleet.gcp.reset(Instance("p", "z", node), "rid")
    for _ in range(2):
        with pytest.raises(errors.Transient, match="no answer"):
            fleet.kube.get_node(node)
    assert fleet.kube.get_node(node)["metadata"]["name"] == node  # two calls only
    assert fleet.counts("fault") == {"gcp.reset 403": 1, "kube.get_node timeout": 2}
    capsys.readouterr()
    assert run_cli(["inject", path, node, "--api-fault", "gcp.reset=200"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --api-fault: 'gcp.reset=200': expected kube.CALL=STATUS")
