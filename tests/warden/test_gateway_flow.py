"""Through Warden's gateway to the workflows (real Temporal dev server, fake Kubernetes): a
shrink from a pod of the run's namespace reaches ShrinkWorkflow with the RayCluster, the
worker-group name the renderer writes (read from a rendered run under apps/) and the count;
a straggler on a node of the team's pods starts that node's workflow, and once the node check
cleared the node a new report of it is skipped (the straggler sweep's rule)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from driver.ft.shrink import ShrinkRequest, ShrinkTarget, gateway_shrink
from warden.client import finding_row, post, report_stragglers_sync
from warden.gateway import Gateway
from warden.model import NodeResult, ShrinkInput, node_workflow_id

APP = Path(__file__).resolve().parents[2] / "apps/ultra-usc1/research/tiny-lm.yaml"


def rendered_worker_group() -> tuple[str, str, int]:
    """(namespace, groupName, replicas) of the rendered RayJob's worker group."""
    job = next(d for d in yaml.safe_load_all(APP.read_text()) if d and d["kind"] == "RayJob")
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    return job["metadata"]["namespace"], group["groupName"], group["replicas"]


async def serving(h, **kwargs):
    loop = asyncio.get_running_loop()
    gateway = Gateway(h.fleet.kube, h.client, h.queue, loop, timings=h.timings, **kwargs)
    server = gateway.serve("127.0.0.1:0")
    return gateway, server, f"http://127.0.0.1:{server.server_port}"


async def started_input(h, workflow_id: str) -> ShrinkInput:
    """The input ShrinkWorkflow was started with, from its history."""
    history = await h.client.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.workflow_type.name == "ShrinkWorkflow"
    return (await h.client.data_converter.decode(started.input.payloads, [ShrinkInput]))[0]


def test_shrink_from_the_runs_namespace_reaches_shrink_workflow(harness, tmp_path):
    namespace, group, replicas = rendered_worker_group()
    name = "tiny-lm-x7k2p"  # KubeRay's name for the RayJob's cluster (the ray.io/cluster label)
    cluster = harness.fleet
    cluster.add_raycluster(namespace, name, {group: replicas, "aux": 1})
    token = tmp_path / "token"
    token.write_text(cluster.issue_token(namespace))
    target = ShrinkTarget(namespace, name, group, workers_per_group=1, workers_per_pod=1)

    async def body(h):
        gateway, server, url = await serving(h)
        try:
            shrink = gateway_shrink(target, url, str(token))
            await asyncio.to_thread(shrink, ShrinkRequest(replicas, replicas - 1))
            await asyncio.to_thread(shrink, ShrinkRequest(replicas, replicas - 1))  # a retry
            workflow_id = f"shrink-{namespace}-{name}-{group}-{replicas - 1}"
            return gateway.counts, await started_input(h, workflow_id)
        finally:
            server.shutdown()

    counts, inp = harness.run(body)
    assert inp == ShrinkInput(namespace, name, group, replicas, replicas - 1)
    groups = cluster.kube.get_raycluster(namespace, name)["spec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["replicas"]) for g in groups] == [(group, replicas - 1), ("aux", 1)]
    assert cluster.counts("shrink") == {f"{namespace}/{name}": 1}  # the retry shrank nothing
    assert counts == {("/v1/shrink", 200): 2}


def test_straggler_on_the_teams_node_starts_its_node_workflow(harness, tmp_path):
    fleet = harness.fleet
    node = fleet.node_name(2)
    fleet.add_pod("lm-x7-worker-3", "research", node)
    fleet.set_outcome(node, "check", "succeeded")
    token = tmp_path / "token"
    token.write_text(fleet.issue_token("research"))
    finding = {"rank": 12, "node": node, "pod": "lm-x7-worker-3", "persistent": 1,
               "windows": 10, "straggler_windows": 9, "delay_us": 31250.0,
               "since": "2026-12-01 14:19:00", "until": "2026-12-01 14:24:00",
               "extra_column": "dropped by the client"}  # fmt: skip

    async def body(h):
        gateway, server, url = await serving(h)
        try:
            report = lambda: report_stragglers_sync(url, [finding], str(token))  # noqa: E731
            first, again = await asyncio.to_thread(report), await asyncio.to_thread(report)
            handle = h.client.get_workflow_handle(node_workflow_id(node), result_type=NodeResult)
            result = await handle.result()
            post_ = lambda: post("/v1/stragglers", {"findings": [row]}, url, str(token))  # noqa: E731
            return first, again, result, await asyncio.to_thread(post_)
        finally:
            server.shutdown()

    row = finding_row(finding)
    first, again, result, after_clear = harness.run(body)
    assert first == {node: True} and again == {node: False}  # one workflow per node
    assert after_clear == (200, {"started": {}, "skipped": {node: "recently cleared"}})
    assert result.outcome == "cleared" and result.actions[0] == "check succeeded"
    decision = [r for r in harness.sink.records if r.action == "clear"][0]
    assert "rank 12 (lm-x7-worker-3) last in 9/10 windows" in decision.reason
    assert "(reported by namespace research)" in decision.reason
