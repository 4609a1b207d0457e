"""Warden's own workflow starters: what the gateway (warden.gateway) and Warden's tests start.

Only Warden reaches Temporal (its NetworkPolicy admits Warden's pod alone); run pods ask
through the gateway, whose client is `warden.client`.

    await request_shrink(client, "warden", ShrinkInput("research", "lm-x7", "h200", 16, 14))
    await report_stragglers(client, findings, "warden")

A persistent NCCL straggler (observability/sql/straggler_findings.sql: a rank that arrived
last in most windows for long enough) is in-job evidence against its node, but not proof:
it is handed to Warden as an ambiguous finding, so the node workflow runs the node check
first and cordons only if the check fails (docs/warden.md). One node workflow per node at a
time: a report while one runs is dropped (False).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import timedelta

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from warden.model import AMBIGUOUS, NodeInput, ShrinkInput, ShrinkResult, Timings, node_workflow_id

NODE_WORKFLOW = "NodeWorkflow"  # warden.workflows.NodeWorkflow, started by name
SHRINK_WORKFLOW = "ShrinkWorkflow"  # warden.workflows.ShrinkWorkflow, started by name


async def report_node(
    client: Client, node: str, reason: str, task_queue: str, timings: Timings | None = None
) -> bool:
    """Start the node workflow for an ambiguous finding on `node`; False when a node
    workflow already runs for it. `timings` default to Warden's defaults."""
    t = timings or Timings()
    try:
        await client.start_workflow(
            NODE_WORKFLOW,
            NodeInput(node, "respond", t, AMBIGUOUS, reason),
            id=node_workflow_id(node),
            task_queue=task_queue,
            task_timeout=timedelta(seconds=t.workflow_task_timeout_s),
        )
    except WorkflowAlreadyStartedError:
        return False
    return True


def straggler_reasons(findings: Iterable[dict]) -> dict[str, str]:
    """One reason per node from persistent straggler findings (rows of
    straggler_findings.sql: rank, node, pod, persistent, straggler_windows, windows,
    delay_us, since, until; with `team` and `run`, the reason names the run); findings that
    are not persistent are left out."""
    per_node: dict[str, list[str]] = {}
    for f in findings:
        if not f.get("persistent"):
            continue
        run = f" of run {f['team']}/{f['run']}" if f.get("run") else ""
        per_node.setdefault(f["node"], []).append(
            f"rank {f['rank']} ({f.get('pod', '?')}){run} last in {f['straggler_windows']}/"
            f"{f['windows']} windows, {float(f['delay_us']) / 1000:.1f} ms behind the median "
            f"rank, {f.get('since', '?')} to {f.get('until', '?')}"
        )
    return {node: "NCCL straggler: " + "; ".join(parts) for node, parts in per_node.items()}


async def report_stragglers(
    client: Client, findings: Iterable[dict], task_queue: str, timings: Timings | None = None
) -> dict[str, bool]:
    """Hand each node with a persistent straggler to Warden; {node: started}."""
    reasons = straggler_reasons(findings)
    started = [report_node(client, n, r, task_queue, timings) for n, r in reasons.items()]
    return dict(zip(reasons, await asyncio.gather(*started), strict=True))


def shrink_workflow_id(inp: ShrinkInput) -> str:
    """One workflow per RayCluster worker group and target size: a retried request (or the
    same request from two ranks) never shrinks twice."""
    return f"shrink-{inp.namespace}-{inp.name}-{inp.group}-{inp.replicas_to}"


async def start_shrink(client: Client, task_queue: str, inp: ShrinkInput):
    """Start (or join, for the same request) the shrink workflow; its handle."""
    return await client.start_workflow(
        SHRINK_WORKFLOW,
        inp,
        id=shrink_workflow_id(inp),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        result_type=ShrinkResult,
    )


async def request_shrink(client: Client, task_queue: str, inp: ShrinkInput) -> ShrinkResult:
    """Shrink a RayCluster worker group and wait for the result; the same request runs once."""
    return await (await start_shrink(client, task_queue, inp)).result()
