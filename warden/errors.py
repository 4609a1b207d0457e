"""What Warden does about a failed Kubernetes or GCP call: one pure table, one error class each.

`classify(status)` maps an HTTP status (None: no answer at all, a timeout or a refused or
reset connection) to one of four verdicts:

- `retry`: no answer (a timeout), 408, 429, 5xx, and GCP's 403 `rateLimitExceeded`:
  retried with backoff, a bounded number of times.
- `conflict`: 409. A create finds the object exists; a conditional patch reads again and
  retries.
- `gone`: 404, 410. Stop: the object (node, VM, RayCluster) is gone.
- `stop`: every other status (400, 401, 403, 422 ...). Stop and report: retrying cannot help.

Both real adapters (`warden.kube`, `warden.gcp`) and the fakes raise `api_error(...)`, so
activities and the worker's interceptor (`warden.faults`) see the same classes everywhere.
"""

from __future__ import annotations

RETRY, CONFLICT, GONE, STOP = "retry", "conflict", "gone", "stop"
NON_RETRYABLE = (GONE, STOP)


def classify(status: int | None, detail: str = "") -> str:
    """The verdict on a failed call with this HTTP status (None: no answer); `detail`, the
    server's message, only tells GCP's rate limits (a 403 `rateLimitExceeded`) apart."""
    if status is None or status in (408, 429) or status >= 500:
        return RETRY
    if status == 403 and "ratelimitexceeded" in detail.lower():
        return RETRY
    if status == 409:
        return CONFLICT
    if status in (404, 410):
        return GONE
    return STOP


class ApiError(Exception):
    """A failed call to Kubernetes or GCP; `status` is None when no answer came."""

    verdict = RETRY

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class Transient(ApiError):
    """No answer (timeout, connection refused) or a 408/429/5xx: retried, within bounds."""


class Refused(Transient):
    """The API server refused for now (429: an eviction a PodDisruptionBudget forbids)."""


class Conflict(ApiError):
    """The object already exists, or changed since it was read (a failed precondition)."""

    verdict = CONFLICT


class NotFound(ApiError):
    """The object does not exist (404, 410)."""

    verdict = GONE


class Fatal(ApiError):
    """Refused for good (400, 401, 403, 422 ...): retrying cannot help; stop and report."""

    verdict = STOP


CLASSES = {RETRY: Transient, CONFLICT: Conflict, GONE: NotFound, STOP: Fatal}
REASONS = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    408: "Request Timeout", 409: "Conflict", 410: "Gone", 422: "Unprocessable Entity",
    429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
}  # fmt: skip


def api_error(service: str, call: str, status: int | None, detail: str = "") -> ApiError:
    """The error for a failed call, e.g. `gcp POST .../reset: HTTP 403 Forbidden: <detail>`.

    `detail` (the server's message, or why no answer came) is cut to 200 characters."""
    if status is None:
        what = "no answer"
    elif status == 429 and service == "kube":
        return Refused(f"{service} {call}: refused for now (HTTP 429)", status)
    else:
        what = f"HTTP {status} {REASONS.get(status, '')}".rstrip()
    verdict = classify(status, detail)
    detail = " ".join(detail.split())[:200]
    message = f"{service} {call}: {what}" + (f": {detail}" if detail else "")
    return CLASSES[verdict](message, status)
