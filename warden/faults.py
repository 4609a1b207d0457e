"""Warden under faults: adapter errors become Temporal failures, failures become reports.

- `FaultInterceptor` (on every worker, `warden.worker.build_worker`): an activity that raises
  a `warden.errors.ApiError` fails with an `ApplicationError` of the same type name, marked
  non-retryable when `warden.errors.classify` says stop or gone (403, 400, 404 ...), so
  Temporal does not retry what cannot succeed; the rest (timeouts, 5xx, 409) is retried
  within the activity's bounded retry policy (`warden.policy.options`).
- `failure_text` (pure, used by the workflows): what stopped a workflow, e.g.
  `reboot: gcp POST .../reset: HTTP 403 Forbidden: ...`, or `job_status: gave up after 20
  attempts: kube GET ...: HTTP 503 ...`.
- `FailureActivities.report_failure`: the report an operator sees: a telemetry record
  (action `failed`) always, and a Warning Event `WardenFailed` on the node when the API
  server takes it.
- `beat`: heartbeat from inside long activities (a no-op when called outside one).
"""

from __future__ import annotations

import hashlib
import logging

from temporalio import activity
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    RetryState,
)
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from warden.errors import NON_RETRYABLE, ApiError
from warden.kube import event_manifest
from warden.model import ActionResult, FailureInput
from warden.telemetry import record

log = logging.getLogger("warden")


def application_error(err: ApiError) -> ApplicationError:
    """The Temporal failure for an adapter error: its class name as the type, non-retryable
    when the status means stop or gone."""
    return ApplicationError(
        str(err), err.status, type=type(err).__name__, non_retryable=err.verdict in NON_RETRYABLE
    )


class _FaultsInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput):
        try:
            return await self.next.execute_activity(input)
        except ApiError as err:
            raise application_error(err) from None


class FaultInterceptor(Interceptor):
    """Turns adapter errors into Temporal failures for every activity of the worker."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _FaultsInbound(next)


def failure_text(err: BaseException, attempts: int = 0) -> str:
    """`<step>: [gave up after N attempts: ]<message>` of an activity or child workflow
    failure (`failure`, joined)."""
    step, message = failure(err, attempts)
    return f"{step}: {message}" if step else message


def failure(err: BaseException, attempts: int = 0) -> tuple[str, str]:
    """(step, message): the innermost activity (or child workflow) that failed, and the
    innermost error's message, prefixed `gave up after N attempts` when retries ran out."""
    step, gave_up, cause = "", False, err
    while isinstance(cause, FailureError):
        if isinstance(cause, ActivityError | ChildWorkflowError):
            is_activity = isinstance(cause, ActivityError)
            step = cause.activity_type if is_activity else step or cause.workflow_type
            gave_up = cause.retry_state in (
                RetryState.MAXIMUM_ATTEMPTS_REACHED,
                RetryState.TIMEOUT,
            )
        if cause.cause is None:
            break
        cause = cause.cause
    message = cause.message if isinstance(cause, FailureError) else str(cause)
    if gave_up:
        message = f"gave up after {attempts or 'its'} attempts: {message}"
    return step, message


def beat(*details) -> None:
    """Heartbeat when running as an activity (a dead worker's attempt is then retried after
    the heartbeat timeout, not the whole start-to-close timeout)."""
    if activity.in_activity():
        activity.heartbeat(*details)


class FailureActivities:
    """Mixed into `WardenActivities` (uses its `kube`, `sink`, `settings`)."""

    @activity.defn
    def report_failure(self, inp: FailureInput) -> ActionResult:
        """Record a step an error stopped; an Event on the node if the API server takes it
        (the error may be Kubernetes refusing Warden: the record is written first)."""
        rid = inp.remediation_id
        rec = record(self.settings.cluster, inp.node, "failed", inp.error, rid, inp.step)
        self.sink.write(rec)
        log.error("warden stopped on %s: %s: %s", inp.node or "-", inp.step, inp.error)
        if inp.node:
            short = hashlib.sha1(rid.encode()).hexdigest()[:10]
            message = f"failed: {inp.step}: {inp.error}"
            try:
                node = self.kube.get_node(inp.node)
                event = event_manifest(
                    f"{inp.node}.warden-failed-{short}", node, "WardenFailed", message, True
                )
                self.kube.create_event(event)
            except ApiError as err:
                log.warning("no WardenFailed Event on %s: %s", inp.node, err)
        return ActionResult(inp.node, True, inp.error)
