"""Activities that steer rather than repair: detect and start node workflows.

`detect` classifies every GPU node with `warden.rules` and lists the nodes Warden cordoned
earlier (the recovery sweep).
`dispatch` starts one `NodeWorkflow` per finding and per node due for recovery, under the
node's workflow ID; a node whose workflow is still running is left to it (the ID is the
lock). Mixed into `WardenActivities` (shrinking and growing RayClusters: `warden.scaling`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from warden import rules
from warden.faults import beat
from warden.model import (
    AMBIGUOUS,
    DetectInput,
    DetectResult,
    DispatchInput,
    DispatchResult,
    NodeInput,
    Timings,
    node_workflow_id,
)
from warden.prom import PromError

NODE_WORKFLOW = "NodeWorkflow"
PARALLEL_STARTS = 64


def node_inputs(inp: DispatchInput) -> list[NodeInput]:
    """The node workflows a sweep asks for: respond to findings, recover cordoned nodes."""
    starts = [
        NodeInput(f.node, "respond", inp.timings, f.severity, f.reason)
        for f in inp.detected.findings
    ]
    starts += [NodeInput(n, "recover", inp.timings, AMBIGUOUS, "") for n in inp.detected.recover]
    return starts


def node_start_options(node: str, task_queue: str, t: Timings) -> dict:
    """How a node's workflow is started. Conflict policy FAIL: a node whose workflow runs is
    left to it, never terminated and restarted (a new run would act again); reuse policy
    ALLOW_DUPLICATE: a node whose last workflow ended may get a new one. Two replicas (or a
    replaced sweep's dispatch still running) racing on one node: one start wins, the other
    gets WorkflowAlreadyStartedError."""
    return {
        "id": node_workflow_id(node),
        "task_queue": task_queue,
        "task_timeout": timedelta(seconds=t.workflow_task_timeout_s),
        "id_conflict_policy": WorkflowIDConflictPolicy.FAIL,
        "id_reuse_policy": WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        "rpc_timeout": timedelta(seconds=t.request_timeout_s),
    }


class ControlActivities:
    def _telemetry(self) -> dict[str, rules.GpuTelemetry]:
        """DCGM figures per node; none while Prometheus is down (conditions still count)."""
        if not self.prom:
            return {}
        try:
            return self.prom.gpu_telemetry()
        except PromError as err:
            activity.logger.warning("sweep without DCGM figures: %s", err)
            return {}

    @activity.defn
    def detect(self, inp: DetectInput) -> DetectResult:
        """Classify every GPU node; list Warden-cordoned nodes for the recovery sweep."""
        now = datetime.now(UTC)
        telemetry = self._telemetry()
        beat("telemetry")
        result = DetectResult()
        nodes = self.kube.list_nodes()
        beat("nodes")
        for index, node in enumerate(nodes):
            if index % 500 == 0:
                beat(index)
            if not rules.is_gpu_node(node):
                continue
            facts = rules.node_facts(node, now)
            if rules.due_for_recovery(facts):
                result.recover.append(facts.name)
            gpu = telemetry.get(facts.name, rules.GpuTelemetry())
            finding = rules.finding_for(facts, gpu, self.settings.rules, now)
            if finding:
                result.findings.append(finding)
        return result

    @activity.defn
    async def dispatch(self, inp: DispatchInput) -> DispatchResult:
        """Start each node's workflow under its one ID (`node_start_options`)."""
        client = activity.client()
        gate = asyncio.Semaphore(PARALLEL_STARTS)

        async def start(node_input: NodeInput) -> bool:
            async with gate:
                options = node_start_options(node_input.node, inp.task_queue, inp.timings)
                try:
                    await client.start_workflow(NODE_WORKFLOW, node_input, **options)
                except WorkflowAlreadyStartedError:
                    return False
                finally:
                    beat(node_input.node)
                return True

        started = await asyncio.gather(*(start(n) for n in node_inputs(inp)))
        return DispatchResult(sum(started), len(started) - sum(started))
