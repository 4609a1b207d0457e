"""Every activity Warden schedules has an attempt timeout and a bounded retry policy with
backoff, and the long ones a heartbeat timeout: read from the workflows' real histories."""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType

from catalog import labels
from tests.warden.conftest import FAST, Harness
from tests.warden.test_workflows import remediate
from warden.model import (
    AMBIGUOUS,
    GrowInput,
    KeepInput,
    ShrinkInput,
    StragglerInput,
    SweepInput,
    Timings,
    keep_workflow_id,
    node_workflow_id,
    stress_workflow_id,
)
from warden.worker import activity_functions, request_shrink
from warden.workflows import GrowWorkflow, KeepWorkflow, StragglerWorkflow, SweepWorkflow

LONG = {"detect", "dispatch", "inspect", "drain", "keep_nodes", "sweep_stragglers", "grow"}
"""activities that may take long (many nodes, many pods): they heartbeat."""


async def scheduled(client, workflow_ids) -> list:
    """(activity type, attributes) of every activity scheduled by these workflows."""
    found = []
    for workflow_id in workflow_ids:
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                found.append((attrs.activity_type.name, attrs))
    return found


def test_every_activity_has_a_timeout_and_bounded_retries(temporal_address, fleet):
    timings = Timings(**{**vars(FAST), "retry_max_attempts": 7, "keep_period_s": 0.1})
    harness = Harness(temporal_address, fleet, timings)
    n = [fleet.node_name(i) for i in range(4)]
    fleet.add_pod("s-0", "research", n[0], priority=labels.PRIORITY_PREEMPTIBLE, run="s")
    fleet.set_outcome(n[2], "diag", "failed")  # escalates
    fleet.inject("gcp", "reset", 403, times=-1, key=n[3])  # stops with a report
    fleet.add_raycluster("research", "lm", {"gpu-workers": 4})

    async def body(h: Harness):
        sweep, keep = f"sweep-{h.queue}", keep_workflow_id(h.queue)
        await h.client.execute_workflow(  # first, so that it starts no node workflow
            SweepWorkflow.run, SweepInput(timings, h.queue, 1), id=sweep, task_queue=h.queue
        )
        await h.client.execute_workflow(
            KeepWorkflow.run, KeepInput(timings, 1), id=keep, task_queue=h.queue
        )
        stragglers = f"stragglers-{h.queue}"  # no store here: one round that finds none
        await h.client.execute_workflow(
            StragglerWorkflow.run, StragglerInput(timings, h.queue, 1), id=stragglers,
            task_queue=h.queue,
        )  # fmt: skip
        await request_shrink(h.client, h.queue, ShrinkInput("research", "lm", "gpu-workers", 4, 3))
        grow = f"grow-{h.queue}"  # after the shrink: one round that finds the group to raise
        await h.client.execute_workflow(
            GrowWorkflow.run, GrowInput(timings, 1), id=grow, task_queue=h.queue
        )
        await asyncio.gather(
            remediate(h, n[0]),
            remediate(h, n[1], AMBIGUOUS, "NVLink"),
            remediate(h, n[2]),
            remediate(h, n[3]),
        )
        ids = [node_workflow_id(x) for x in n] + [stress_workflow_id(x) for x in (n[0], n[2])]
        return await scheduled(
            h.client, [*ids, sweep, keep, stragglers, grow, "shrink-research-lm-gpu-workers-3"]
        )

    found = harness.run(body)
    registered = {fn.__name__ for fn in activity_functions(harness.activities())}
    assert {name for name, _ in found} == registered  # every activity was seen here
    for name, attrs in found:
        policy = attrs.retry_policy
        assert attrs.start_to_close_timeout.ToTimedelta().total_seconds() > 0, name
        assert policy.maximum_attempts >= 1, name
        assert policy.backoff_coefficient == 2.0, name
        assert policy.maximum_interval.ToTimedelta().total_seconds() > 0, name
        assert "Fatal" in policy.non_retryable_error_types, name
        heartbeat = attrs.heartbeat_timeout.ToTimedelta().total_seconds()
        assert (heartbeat > 0) == (name in LONG), name
        if name != "shrink":  # training's shrink request runs with Warden's default timings
            assert policy.maximum_attempts == 7, name
