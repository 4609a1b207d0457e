"""`warden status` and `warden history`: a node's remediations, read from Temporal.

The node workflow's ID is `node-<name>`, so its runs are the node's remediation history;
each run's event history says which activities ran, when, and with what result.
"""

from __future__ import annotations

import asyncio
import json

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from warden.model import node_workflow_id


class NoWorkflow(Exception):
    """No remediation workflow exists for the node."""


class Unreachable(Exception):
    """The Temporal server does not answer at the address."""


def _payload(payloads) -> str:
    values = [json.loads(p.data) if p.data else None for p in payloads]
    text = json.dumps(values[0] if len(values) == 1 else values, sort_keys=True)
    return text if len(text) <= 160 else text[:157] + "..."


def _brief_input(payloads) -> str:
    """`respond definite: XID 79 ...` from a NodeInput payload."""
    try:
        data = json.loads(payloads[0].data)
    except (IndexError, ValueError):
        return ""
    if data.get("mode") == "recover":
        return "recover"
    return f"{data.get('mode')} {data.get('severity')}: {data.get('reason')}"


def event_lines(events) -> list[str]:
    """One line per step of a node workflow's history."""
    scheduled: dict[int, str] = {}
    lines = []
    for event in events:
        stamp = event.event_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S")
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            attrs = event.workflow_execution_started_event_attributes
            lines.append(f"{stamp}  started    {_brief_input(attrs.input.payloads)}")
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            name = scheduled.get(attrs.scheduled_event_id, "?")
            lines.append(f"{stamp}  {name:<10} {_payload(attrs.result.payloads)}")
        elif kind in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        ):
            attrs = (
                event.activity_task_failed_event_attributes
                if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
                else event.activity_task_timed_out_event_attributes
            )
            name = scheduled.get(attrs.scheduled_event_id, "?")
            lines.append(f"{stamp}  {name:<10} FAILED {attrs.failure.message}")
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            seconds = event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
            lines.append(f"{stamp}  wait       {seconds.total_seconds():g}s")
        elif kind == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
            attrs = event.child_workflow_execution_completed_event_attributes
            lines.append(f"{stamp}  stress     {_payload(attrs.result.payloads)}")
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            attrs = event.workflow_execution_completed_event_attributes
            lines.append(f"{stamp}  finished   {_payload(attrs.result.payloads)}")
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            attrs = event.workflow_execution_failed_event_attributes
            lines.append(f"{stamp}  FAILED     {attrs.failure.message}")
    return lines


async def connect(address: str, namespace: str, runtime=None) -> Client:
    """A Temporal client; an unreachable server is one `Unreachable` line, no traceback."""
    try:
        return await Client.connect(address, namespace=namespace, runtime=runtime)
    except RuntimeError as err:  # the SDK's connect error: no server, or a wrong address
        reason = str(err).split(":", 1)[0]
        message = f"temporal.address {address}: {reason} (is the server running?)"
        raise Unreachable(message) from None


async def status_lines(address: str, namespace: str, node: str) -> list[str]:
    client = await connect(address, namespace)
    handle = client.get_workflow_handle(node_workflow_id(node))
    try:
        desc = await handle.describe()
    except RPCError:
        raise NoWorkflow(f"no remediation workflow for node {node}") from None
    lines = [
        f"node:     {node}",
        f"workflow: {desc.id} (run {desc.run_id})",
        f"status:   {desc.status.name if desc.status else '?'}",
        f"started:  {desc.start_time:%Y-%m-%d %H:%M:%S}",
    ]
    if desc.status == WorkflowExecutionStatus.RUNNING:
        try:
            phase = await asyncio.wait_for(handle.query("current_phase"), 5)
        except (TimeoutError, RPCError):
            phase = "unknown (no worker answered)"
        lines.append(f"phase:    {phase}")
        for pending in desc.raw_description.pending_activities:
            attempt = f" (attempt {pending.attempt})" if pending.attempt > 1 else ""
            lines.append(f"activity: {pending.activity_type.name}{attempt}")
            if pending.attempt > 1 and pending.HasField("last_failure"):
                lines.append(f"retrying: {pending.last_failure.message}")
    elif desc.status == WorkflowExecutionStatus.COMPLETED:
        result = await handle.result()
        lines.append(f"closed:   {desc.close_time:%Y-%m-%d %H:%M:%S}")
        if not isinstance(result, dict):
            result = {"outcome": result}
        lines.append(f"outcome:  {result['outcome']}")
        if result.get("detail"):  # what stopped a failed remediation
            lines.append(f"detail:   {result['detail']}")
    return lines


async def history_lines(address: str, namespace: str, node: str) -> list[str]:
    client = await connect(address, namespace)
    query = f'WorkflowId = "{node_workflow_id(node)}"'
    runs = [run async for run in client.list_workflows(query)]
    if not runs:
        raise NoWorkflow(f"no remediation workflow for node {node}")
    lines = []
    for run in sorted(runs, key=lambda r: r.start_time):
        lines.append(f"== run {run.run_id} ({run.status.name if run.status else '?'})")
        handle = client.get_workflow_handle(run.id, run_id=run.run_id)
        lines += event_lines([event async for event in handle.fetch_history_events()])
    return lines
