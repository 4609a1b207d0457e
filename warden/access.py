"""What Warden's gateway lets a run pod ask, decided without I/O (warden.gateway does the I/O).

    who = caller(review_status, audience="warden", service_accounts={"training"})
    body = parse(ShrinkBody, raw_bytes)            # Refusal(400, "replicas_to: ...") if bad
    group_index(raycluster_obj, body.worker_group) # Refusal(404, ...) for a group it lacks

Every refusal is a `Refusal(status, reason)`: an HTTP status and one line saying why.
The caller is the Kubernetes service account whose projected token the pod presented
(a TokenReview's answer): its namespace bounds what it may touch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from catalog import boundedjson

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
# DNS-1123 labels: Kubernetes namespaces, RayCluster and worker-group names, node names.
NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
STAMP = r"^[0-9A-Za-z:. +-]*$"  # a timestamp as ClickHouse prints it; no line breaks
MAX_REPLICAS = 100_000
MAX_FINDINGS = 256
MAX_PODS = 256
MAX_DEPTH = 8  # nesting of a body's JSON (the routes' bodies need 3)
T = TypeVar("T", bound="Strict")


class Refusal(Exception):
    """A request the gateway refuses: `status` (HTTP) and a one-line `reason`."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class Caller:
    namespace: str
    service_account: str


def caller(status: dict, audience: str, service_accounts: frozenset[str] | set[str]) -> Caller:
    """The caller a TokenReview `status` names; Refusal 401 for a token the API server did
    not accept for `audience`, 403 for anything but one of `service_accounts`."""
    if not status.get("authenticated"):
        raise Refusal(401, f"token not accepted: {status.get('error') or 'not authenticated'}")
    if audience not in (status.get("audiences") or []):
        raise Refusal(401, f"token not accepted: not issued for audience {audience}")
    username = str((status.get("user") or {}).get("username", ""))
    namespace, _, account = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    if not username.startswith(SERVICE_ACCOUNT_PREFIX) or not namespace or not account:
        raise Refusal(403, f"{username or 'the caller'} is not a service account")
    if account not in service_accounts:
        raise Refusal(403, f"service account {namespace}/{account} may not use the gateway")
    return Caller(namespace, account)


def bearer(header: str | None) -> str:
    """The token of an `Authorization: Bearer ...` header; Refusal 401 without one."""
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Refusal(401, "no bearer token (Authorization: Bearer <projected token>)")
    return token.strip()


def body_length(headers, limit: int) -> int:
    """The length of a JSON request body (`Content-Length`, at most `limit` bytes): 415 for
    another type, 411 without a length, 400 for a length that is not a decimal number (or
    given twice, or with a Transfer-Encoding), 413 over `limit`."""
    kind = (headers.get("Content-Type") or "").partition(";")[0].strip().lower()
    if kind != "application/json":
        raise Refusal(415, "Content-Type must be application/json")
    if headers.get("Transfer-Encoding") is not None:
        raise Refusal(400, "Transfer-Encoding is not supported; send Content-Length")
    lengths = headers.get_all("Content-Length") if hasattr(headers, "get_all") else None
    length = headers.get("Content-Length")
    if length is None:
        raise Refusal(411, "Content-Length required")
    length = length.strip()
    if not (length.isascii() and length.isdigit()) or len(lengths or [length]) > 1:
        raise Refusal(400, f"Content-Length {length[:20]!r} is not one decimal number")
    if len(length) > 12 or int(length) > limit:
        raise Refusal(413, f"body of {length[:20]} bytes is over {limit}")
    return int(length)


PodName = Annotated[str, Field(pattern=NAME, max_length=253)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class ShrinkBody(Strict):
    """POST /v1/shrink: lower a worker group of a RayCluster in the caller's namespace."""

    raycluster: str = Field(pattern=NAME, max_length=63)
    worker_group: str = Field(pattern=NAME, max_length=63)
    replicas_from: int = Field(ge=1, le=MAX_REPLICAS)
    replicas_to: int = Field(ge=0, le=MAX_REPLICAS)
    namespace: str | None = Field(default=None, pattern=NAME, max_length=63)
    """Optional; when given it must be the caller's own."""
    pods: list[PodName] = Field(default_factory=list, max_length=MAX_PODS)
    """The lost replica group's pods; Warden deletes only those of the worker group."""


class Finding(Strict):
    """One row of observability/sql/straggler_findings.sql."""

    rank: int = Field(ge=0)
    node: str = Field(pattern=NAME, max_length=253)
    pod: str = Field(default="?", pattern=NAME, max_length=253)
    persistent: bool
    straggler_windows: int = Field(ge=0)
    windows: int = Field(ge=0)
    delay_us: float = Field(ge=0)
    since: str = Field(default="?", pattern=STAMP, max_length=40)
    until: str = Field(default="?", pattern=STAMP, max_length=40)


class NodeChecksBody(Strict):
    """POST /v1/nodechecks: nodes a failed run's analysis found at fault (a person approved
    handing them over: `runner diagnose --approve`), each checked before any cordon."""

    nodes: list[str] = Field(min_length=1, max_length=MAX_FINDINGS)
    reason: str = Field(min_length=1, max_length=300, pattern=r"^[^\n\r]*$")
    run: str = Field(default="", pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$", max_length=63)

    def node_names(self) -> list[str]:
        import re

        for node in self.nodes:
            if len(node) > 253 or not re.match(NAME, node):
                raise Refusal(400, f"nodes: {node[:60]!r} is not a node name")
        return sorted(set(self.nodes))


class StragglersBody(Strict):
    """POST /v1/stragglers: persistent stragglers on nodes the caller's pods run on."""

    findings: list[Finding] = Field(min_length=1, max_length=MAX_FINDINGS)


def parse(model: type[T], raw: bytes) -> T:
    """`raw` (a JSON object) as `model`; Refusal 400 naming the first bad field."""
    try:
        data = boundedjson.loads(raw, MAX_DEPTH)
    except ValueError as err:  # invalid, too deep, a non-finite number
        raise Refusal(400, f"body is not JSON the gateway takes: {err}"[:200]) from None
    if not isinstance(data, dict):
        raise Refusal(400, "body is not a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise Refusal(400, f"{field}: {first['msg']}") from None


def check_shrink(body: ShrinkBody, who: Caller) -> None:
    """Refusal for a RayCluster outside the caller's namespace (403) or a grow (400)."""
    if body.namespace is not None and body.namespace != who.namespace:
        raise Refusal(403, f"namespace {body.namespace} is not the caller's ({who.namespace})")
    if body.replicas_to >= body.replicas_from:
        raise Refusal(
            400,
            f"replicas_to {body.replicas_to} is not below replicas_from {body.replicas_from}: "
            "the gateway only shrinks",
        )


def group_index(raycluster: dict, group: str) -> int:
    """Index of worker group `group` in a RayCluster; Refusal 404 when it has none."""
    groups = [g.get("groupName") for g in raycluster.get("spec", {}).get("workerGroupSpecs", [])]
    if group not in groups:
        meta = raycluster.get("metadata", {})
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        raise Refusal(404, f"RayCluster {where} has no worker group {group} (has: {groups})")
    return groups.index(group)
