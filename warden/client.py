"""The Warden client: the one Warden module training code may import (stdlib HTTP only).

It speaks to Warden's gateway (warden.gateway), the only Warden surface a run pod reaches,
with the pod's projected service-account token; nothing of Temporal, the worker or the
adapters is imported, so training pays nothing for it.

    from warden.client import start_shrink_sync, report_stragglers_sync
    start_shrink_sync(None, "research", "lm-x7", "h200", 16, 14)   # WARDEN_URL, token file
    report_stragglers_sync(None, findings)                          # {node: started}

In a run pod the runner sets `WARDEN_URL` (the gateway's Service) and `WARDEN_TOKEN_FILE`
(the projected token, audience `warden`, rotated by the kubelet: read per request). A
refusal raises `GatewayError` with the gateway's status and one-line reason.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterable

from warden.model import ShrinkResult

URL_ENV = "WARDEN_URL"
TOKEN_ENV = "WARDEN_TOKEN_FILE"
# The columns of observability/sql/straggler_findings.sql the gateway takes (warden.access).
FINDING_FIELDS = {"rank": int, "node": str, "pod": str, "persistent": bool,
                  "straggler_windows": int, "windows": int, "delay_us": float,
                  "since": str, "until": str}  # fmt: skip


class GatewayError(RuntimeError):
    """The gateway refused or could not be reached (`status` 0)."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"warden gateway: {status or 'unreachable'}: {reason}")
        self.status, self.reason = status, reason


def post(path: str, body: dict, url: str | None = None, token_file: str | None = None,
         timeout_s: float = 60.0) -> tuple[int, dict]:  # fmt: skip
    """POST `body` to the gateway at `url` (else $WARDEN_URL) with the token read from
    `token_file` (else $WARDEN_TOKEN_FILE); (status, reply) of a 2xx, else GatewayError."""
    base = url or os.environ.get(URL_ENV)
    token_path = token_file or os.environ.get(TOKEN_ENV)
    if not base or not token_path:
        raise GatewayError(0, f"{URL_ENV} and {TOKEN_ENV} must be set in the pod")
    try:
        with open(token_path) as f:
            token = f.read().strip()
    except OSError as err:
        raise GatewayError(0, f"token file {token_path}: {err.strerror}") from None
    request = urllib.request.Request(
        base.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        try:
            reason = json.loads(err.read()).get("error", "")
        except (ValueError, AttributeError):
            reason = ""
        raise GatewayError(err.code, reason or str(err.reason)) from None
    except (urllib.error.URLError, OSError) as err:
        raise GatewayError(0, str(getattr(err, "reason", err))) from None


def start_shrink_sync(url: str | None, namespace: str, name: str, group: str,
                      replicas_from: int, replicas_to: int, token_file: str | None = None,
                      timeout_s: float = 60.0, pods: Iterable[str] = ()
                      ) -> ShrinkResult | None:  # fmt: skip
    """Ask Warden to shrink RayCluster `namespace/name`'s worker group `group` from
    `replicas_from` to `replicas_to` pods, deleting the lost replica group's `pods` and no
    other (driver.ft.shrink's starter): the result, or None while the shrink still runs
    (the gateway answered 202). The same request shrinks once."""
    body = {"namespace": namespace, "raycluster": name, "worker_group": group}
    body |= {"replicas_from": replicas_from, "replicas_to": replicas_to}
    if pods:
        body["pods"] = list(pods)
    status, reply = post("/v1/shrink", body, url, token_file, timeout_s)
    if status == 202:
        return None
    return ShrinkResult(reply["replicas_before"], reply["replicas_after"], reply["changed"],
                        list(reply.get("deleted", [])))  # fmt: skip


def request_node_checks_sync(url: str | None, nodes: Iterable[str], reason: str, run: str = "",
                             token_file: str | None = None, timeout_s: float = 60.0
                             ) -> dict:  # fmt: skip
    """Hand nodes a run's failure analysis named to Warden for a node check (the check runs
    first; a node is cordoned only if it fails): the gateway's reply, {"started": {node:
    bool}, "skipped": {node: why}}. `runner diagnose --approve` calls it once a person said
    yes."""
    body = {"nodes": sorted(set(nodes)), "reason": " ".join(reason.split())[:300], "run": run}
    _, reply = post("/v1/nodechecks", body, url, token_file, timeout_s)
    return reply


def finding_row(row: dict) -> dict:
    """A straggler_findings.sql row reduced to the columns the gateway takes, typed."""
    return {k: kind(row[k]) for k, kind in FINDING_FIELDS.items() if row.get(k) not in (None, "")}


def report_stragglers_sync(url: str | None, findings: Iterable[dict],
                           token_file: str | None = None, timeout_s: float = 60.0
                           ) -> dict[str, bool]:  # fmt: skip
    """Hand each node with a persistent straggler to Warden as an ambiguous finding (node
    check first); {node: started}, False where a node workflow already runs. A node Warden
    skips (cordoned, or recently cleared by a node check) is left out."""
    rows = [finding_row(f) for f in findings if f.get("persistent")]
    if not rows:
        return {}
    _, reply = post("/v1/stragglers", {"findings": rows}, url, token_file, timeout_s)
    return {str(k): bool(v) for k, v in reply.get("started", {}).items()}
