"""Activity options and failure reports shared by every Warden workflow (sandbox-safe).

`options` gives every activity a start-to-close timeout and a bounded retry policy with
exponential backoff; `long_options` a longer attempt that heartbeats. `report` records what
stopped a step (`report_failure`: a telemetry record, an Event on the node when it can) and
returns the text the workflow's result and phase carry.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from warden.activities import WardenActivities as A
    from warden.faults import failure
    from warden.model import FailureInput, Timings

NON_RETRYABLE = ["NodeGone", "NotFound", "Fatal"]
"""error types never retried (`warden.errors`: gone, stop); the interceptor marks them too."""
FAILED = (ActivityError, ChildWorkflowError)


def options(t: Timings, timeout_s: float | None = None, heartbeat: bool = False) -> dict:
    """Activity options: a short attempt timeout, so a crashed worker's attempt is retried;
    exponential backoff and at most `retry_max_attempts` attempts; `heartbeat` (long
    activities): a dead worker's attempt is retried after `activity_timeout_s` of silence."""
    found = {
        "start_to_close_timeout": timedelta(seconds=timeout_s or t.activity_timeout_s),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(seconds=t.retry_initial_s),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=t.retry_initial_s * 30),
            maximum_attempts=max(1, t.retry_max_attempts),
            non_retryable_error_types=NON_RETRYABLE,
        ),
    }
    if heartbeat:
        found["heartbeat_timeout"] = timedelta(seconds=t.activity_timeout_s)
    return found


def long_options(t: Timings, floor_s: float) -> dict:
    """A long activity (a sweep, a node's workloads): a longer attempt that heartbeats."""
    return options(t, max(t.activity_timeout_s * 5, floor_s), heartbeat=True)


async def report(t: Timings, node: str, rid: str, err: BaseException) -> str:
    """Record what stopped a step (an Event on the node when it can); the error's text."""
    step, message = failure(err, t.retry_max_attempts)
    try:
        await workflow.execute_activity_method(
            A.report_failure, FailureInput(node, rid, step, message), **options(t)
        )
    except FAILED:
        workflow.logger.error("no report for %s: %s: %s", node or "-", step, message)
    return f"{step}: {message}" if step else message
