"""Detection sweep, recovery sweep, shrink requests and the status/history commands."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta

import pytest
from click.testing import CliRunner

from catalog import labels
from tests.warden.conftest import Harness
from warden import annotations as ann
from warden.cli import cli, run_cli
from warden.fakefleet import FakeCluster
from warden.model import ShrinkInput, SweepInput, Timings, node_workflow_id
from warden.worker import request_shrink, start_sweep, sweep_workflow_id
from warden.workflows import SweepWorkflow


async def sweep_once(h) -> tuple:
    """One sweep, then wait for every node workflow it started."""
    result = await h.client.execute_workflow(
        SweepWorkflow.run,
        SweepInput(h.timings, h.queue, sweeps=1),
        id=f"sweep-{h.queue}",
        task_queue=h.queue,
    )
    outcomes = {}
    for node in h.fleet.kube.list_nodes():
        name = node["metadata"]["name"]
        try:
            handle = h.client.get_workflow_handle(node_workflow_id(name))
            outcomes[name] = (await handle.result()).get("outcome")
        except Exception:  # no workflow for a healthy node
            continue
    return result, outcomes


def test_sweep_detects_faults_and_starts_one_workflow_per_faulty_node(harness):
    fleet = harness.fleet
    n = [fleet.node_name(i) for i in range(4)]
    fleet.set_metrics(n[0], xids=[79])  # definite (DCGM)
    fleet.set_condition(n[1], "KernelDeadlock", "TaskHung")  # definite (kernel log)
    fleet.set_metrics(n[2], nvlink_errors=500)  # ambiguous -> node check passes
    fleet.add_pod("p", "research", n[0], priority=labels.PRIORITY_HIGH, run="big")
    result, outcomes = harness.run(sweep_once)
    assert (result.started, result.already_running) == (3, 0)
    assert outcomes == {n[0]: "busy", n[1]: "uncordoned", n[2]: "cleared"}
    assert set(fleet.counts("cordon")) == {n[0], n[1]}

    # The recovery sweep retries the busy node quietly while its workload runs ...
    fleet.set_condition(n[1], "KernelDeadlock", "Ok", status="False")  # repaired for good
    result, outcomes = harness.run(sweep_once)
    assert result.started == 1 and outcomes[n[0]] == "busy"
    assert len(fleet.events("WardenBusy")) == 1 and fleet.counts("reboot") == {n[1]: 1}

    # ... and repairs it once the workload has gone.
    fleet.kube.evict_pod("research", "p")
    fleet.clear_metrics(n[0])
    result, outcomes = harness.run(sweep_once)
    assert result.started == 1
    assert outcomes[n[0]] == "uncordoned"
    assert fleet.counts("reboot") == {n[0]: 1, n[1]: 1}


def test_not_ready_node_is_cordoned_after_the_grace(harness):
    fleet = harness.fleet
    node = fleet.node_name(3)
    fleet.set_condition(node, "Ready", "KubeletNotReady", status="False")  # an hour ago
    result, outcomes = harness.run(sweep_once)
    assert outcomes == {node: "uncordoned"}  # the reboot brought it back


def ready(fleet, node: str, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        conditions = fleet.node(node)["status"]["conditions"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return True
        time.sleep(0.05)
    return False


def test_escalated_node_returns_through_the_recovery_sweep_after_gcp_repair(harness):
    fleet = harness.fleet
    node = fleet.node_name(2)
    fleet.set_outcome(node, "diag", "failed")
    fleet.set_metrics(node, xids=[79])
    result, outcomes = harness.run(sweep_once)
    assert outcomes == {node: "escalated"} and fleet.counts("repair") == {node: 1}
    assert ann.ESCALATED in fleet.node(node)["metadata"]["annotations"]

    # GCP moved the VM to a healthy host (the fake restarts it); once it is Ready with a new
    # boot id, the recovery sweep reboots and stress-tests it again and puts it back.
    fleet.set_outcome(node, "diag", "succeeded")
    assert ready(fleet, node)
    result, outcomes = harness.run(sweep_once)
    assert result.started == 1 and outcomes == {node: "uncordoned"}
    have = fleet.node(node)
    assert not have["spec"]["unschedulable"]
    assert ann.ESCALATED not in have["metadata"]["annotations"]
    assert fleet.counts("repair") == {node: 1} and fleet.counts("reboot") == {node: 2}


def test_shrink_request_lowers_worker_replicas_once(harness):
    fleet = harness.fleet
    fleet.add_raycluster("research", "lm", {"gpu-workers": 16, "aux": 2})
    request = ShrinkInput("research", "lm", "gpu-workers", replicas_from=16, replicas_to=14)

    async def twice(h):
        return [await request_shrink(h.client, h.queue, request) for _ in range(2)]

    first, second = harness.run(twice)
    assert (first.replicas_before, first.replicas_after, first.changed) == (16, 14, True)
    assert (second.replicas_before, second.replicas_after, second.changed) == (14, 14, False)
    groups = fleet.kube.get_raycluster("research", "lm")["spec"]["workerGroupSpecs"]
    assert [(g["replicas"], g["minReplicas"]) for g in groups] == [(14, 14), (2, 2)]
    assert fleet.counts("shrink") == {"research/lm": 1}
    assert fleet.events("WardenShrink")[0]["involvedObject"]["kind"] == "RayCluster"


def test_status_and_history_read_the_workflow_history(harness, temporal_address):
    fleet = harness.fleet
    node = fleet.node_name(0)
    fleet.set_metrics(node, xids=[48])
    harness.run(sweep_once)
    runner = CliRunner()
    status = runner.invoke(cli, ["status", node, "--address", temporal_address])
    assert status.exit_code == 0, status.output
    assert "COMPLETED" in status.output and "outcome:  uncordoned" in status.output
    history = runner.invoke(cli, ["history", node, "--address", temporal_address])
    assert history.exit_code == 0, history.output
    steps = [line.split()[2] for line in history.output.splitlines() if not line.startswith("==")]
    assert steps[0] == "started" and steps[-1] == "finished"
    for step in ("cordon", "inspect", "reboot", "boot_state", "stress", "uncordon"):
        assert step in steps
    assert "double-bit ECC error" in history.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["status", "no-such-node"], 4, "no remediation workflow for node no-such-node"),
        (["history", "no-such-node"], 4, "no remediation workflow for node no-such-node"),
        (["status", "n1", "--address", "127.0.0.1:1"], 1, "temporal.address 127.0.0.1:1"),
        (["inject", "{tmp}/none.json", "n1", "--xid", "79"], 2, "{tmp}/none.json: PATH: no fake"),
        (["inject", "{tmp}/fleet.json", "gpu-9", "--xid", "79"], 4, "node gpu-9 not found"),
        (["inject", "{tmp}/fleet.json", "gpu-0000", "--xid", "x"], 2, "'--xid': 'x' is not"),
        (["inject", "{tmp}/fleet.json", "gpu-0000", "--outcome", "check=ok"], 2, "--outcome"),
        (["fake-fleet", "{tmp}/other.json", "--nodes", "0"], 2, "'--nodes': 0 is not"),
        (["worker", "--fake", "{tmp}/none.json", "--config", "{tmp}/w.yaml"], 2, "--fake: no"),
    ],
)
def test_cli_errors_are_one_line_with_exit_codes(
    tmp_path, capsys, temporal_address, args, code, message
):
    FakeCluster.create(tmp_path / "fleet.json", nodes=1)
    (tmp_path / "w.yaml").write_text("cluster: ultra-usc1\njobs: {check_image: img}\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if argv[0] in ("status", "history") and "--address" not in argv:
        argv += ["--address", temporal_address]
    assert run_cli(argv) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert message.replace("{tmp}", str(tmp_path)) in err


@pytest.mark.slow
def test_scale_sweep_over_1250_nodes(temporal_address):
    """1,250 nodes (10,000 GPUs), one in ten faulty: the sweep and every repair complete."""
    fleet = FakeCluster.create(
        nodes=1250, reboot_s=0.5, job_s=0.2, prefix=f"s{uuid.uuid4().hex[:5]}"
    )
    faulty = [fleet.node_name(i) for i in range(0, 1250, 10)]
    for node in faulty:
        fleet.set_metrics(node, xids=[79])
    harness = Harness(temporal_address, fleet)
    harness.timings.poll_s = 0.5
    harness.timings.workflow_task_timeout_s = 10
    started = time.monotonic()
    result, outcomes = harness.run(sweep_once)
    elapsed = time.monotonic() - started
    print(f"sweep of 1250 nodes, {len(faulty)} repaired, in {elapsed:.1f}s")
    assert result.started == len(faulty)
    assert outcomes == {node: "uncordoned" for node in faulty}
    assert fleet.counts("reboot") == {node: 1 for node in faulty}


def test_sweep_over_1250_nodes_detects_every_fault(harness):
    """The detection half at full scale (fast): 1,250 nodes, one sweep, 125 workflows started."""
    fleet = harness.fleet
    fleet.add_nodes(1246)
    faulty = [fleet.node_name(i) for i in range(0, 1250, 10)]
    for node in faulty:
        fleet.set_metrics(node, xids=[79])
    for i in range(1250):
        if i % 10:
            fleet.add_pod(
                f"p{i}", "research", fleet.node_name(i), priority=labels.PRIORITY_HIGH, run=f"r{i}"
            )

    async def detect_only(h):
        # sweep, but the node workflows run on a queue nobody serves: count starts only
        return await h.client.execute_workflow(
            SweepWorkflow.run, SweepInput(h.timings, h.queue + "-idle", sweeps=1),
            id=f"sweep-{h.queue}", task_queue=h.queue, execution_timeout=timedelta(seconds=120),
        )  # fmt: skip

    result = harness.run(detect_only)
    assert result.started == len(faulty)

    async def cleanup(h):
        await asyncio.gather(
            *(h.client.get_workflow_handle(node_workflow_id(n)).terminate() for n in faulty)
        )

    harness.run(cleanup)


def test_a_worker_started_with_new_settings_replaces_the_running_sweep(harness):
    cluster = f"c-{harness.queue}"

    async def twice(h):
        first = await start_sweep(h.client, cluster, h.queue + "-idle", h.timings)
        newer = Timings(**(vars(h.timings) | {"sweep_period_s": 7.0}))
        second = await start_sweep(h.client, cluster, h.queue + "-idle", newer)
        runs = [h.client.get_workflow_handle(x.id, run_id=x.result_run_id) for x in (first, second)]
        described = [await run.describe() for run in runs]
        await second.terminate()
        return first, second, described

    first, second, (old, new) = harness.run(twice)
    assert first.id == second.id == sweep_workflow_id(cluster)
    assert old.run_id != new.run_id and old.status.name == "TERMINATED"
    assert new.status.name == "RUNNING"
