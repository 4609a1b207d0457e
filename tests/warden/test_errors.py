"""The one classification of failed Kubernetes and GCP calls, and what Temporal makes of it."""

from __future__ import annotations

import pytest
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    RetryState,
)

from warden import errors
from warden.errors import CONFLICT, GONE, RETRY, STOP, classify
from warden.faults import application_error, failure_text
from warden.policy import NON_RETRYABLE


@pytest.mark.parametrize(
    ("status", "detail", "verdict", "cls"),
    [
        (None, "", RETRY, errors.Transient),  # no answer: a timeout, a refused connection
        (408, "", RETRY, errors.Transient),
        (429, "", RETRY, errors.Transient),
        (500, "", RETRY, errors.Transient),
        (502, "", RETRY, errors.Transient),
        (503, "", RETRY, errors.Transient),
        (504, "", RETRY, errors.Transient),
        (409, "", CONFLICT, errors.Conflict),
        (404, "", GONE, errors.NotFound),
        (410, "", GONE, errors.NotFound),
        (400, "", STOP, errors.Fatal),
        (401, "", STOP, errors.Fatal),
        (403, "", STOP, errors.Fatal),
        (403, "Quota exceeded: quotaExceeded", STOP, errors.Fatal),
        (403, '{"reason": "rateLimitExceeded"}', RETRY, errors.Transient),  # GCP's rate limit
        (405, "", STOP, errors.Fatal),
        (422, "", STOP, errors.Fatal),
        (301, "", STOP, errors.Fatal),
    ],
)  # fmt: skip
def test_classify(status, detail, verdict, cls):
    assert classify(status, detail) == verdict
    err = errors.api_error("gcp", "POST /reset", status, detail)
    assert type(err) is cls and err.verdict == verdict and err.status == status


@pytest.mark.parametrize(
    ("err", "kind", "non_retryable"),
    [
        (errors.api_error("kube", "PATCH /api/v1/nodes/n1", 503), "Transient", False),
        (errors.api_error("kube", "GET /api/v1/nodes/n1", None, "timed out"), "Transient", False),
        (errors.api_error("kube", "POST .../eviction", 429), "Refused", False),
        (errors.api_error("kube", "PATCH /api/v1/nodes/n1", 409), "Conflict", False),
        (errors.api_error("gcp", "POST .../reset", 403, "denied"), "Fatal", True),
        (errors.api_error("gcp", "POST .../reset", 400, "bad"), "Fatal", True),
        (errors.api_error("gcp", "POST .../reset", 404), "NotFound", True),
    ],
)
def test_temporal_failures_stop_exactly_the_non_retryable_errors(err, kind, non_retryable):
    failure = application_error(err)
    assert (failure.type, failure.non_retryable) == (kind, non_retryable)
    assert (kind in NON_RETRYABLE) == non_retryable  # the retry policy agrees
    assert failure.message == str(err)


def test_messages_name_the_call_and_status_and_stay_short():
    err = errors.api_error("gcp", "POST https://x/instances/n1/reset", 403, "denied\n" * 500)
    text = str(err)
    assert text.startswith("gcp POST https://x/instances/n1/reset: HTTP 403 Forbidden: denied")
    assert "\n" not in text and len(text) < 300
    assert str(errors.api_error("kube", "GET /x", None, "")) == "kube GET /x: no answer"


def activity_error(kind: str, cause: BaseException, state: RetryState) -> ActivityError:
    err = ActivityError(
        "activity error",
        scheduled_event_id=1,
        started_event_id=2,
        identity="w",
        activity_type=kind,
        activity_id="1",
        retry_state=state,
    )
    err.__cause__ = cause
    return err


def test_failure_text_names_the_step_and_the_innermost_error():
    fatal = ApplicationError("gcp POST .../reset: HTTP 403 Forbidden", type="Fatal")
    stopped = activity_error("reboot", fatal, RetryState.NON_RETRYABLE_FAILURE)
    assert failure_text(stopped, 20) == "reboot: gcp POST .../reset: HTTP 403 Forbidden"
    flaky = ApplicationError("kube GET /apis/batch/v1/...: HTTP 503", type="Transient")
    gave_up = activity_error("job_status", flaky, RetryState.MAXIMUM_ATTEMPTS_REACHED)
    child = ChildWorkflowError(
        "child failed",
        namespace="default",
        workflow_id="stress-n1",
        run_id="r",
        workflow_type="StressTestWorkflow",
        initiated_event_id=1,
        started_event_id=2,
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    child.__cause__ = gave_up
    assert failure_text(child, 20) == (
        "job_status: gave up after 20 attempts: kube GET /apis/batch/v1/...: HTTP 503"
    )
