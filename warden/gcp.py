"""The narrow adapter through which Warden reaches the GCP APIs: reboot and repair a VM.

`RealGcp` calls the Compute Engine and GKE REST APIs with Application Default Credentials
(`google.auth`); every mutating call carries a `requestId`, so a retried activity never
resets or repairs twice (Compute Engine deduplicates requests by that id). The tests use
`warden.fakefleet.FakeGcp` and check `RealGcp`'s requests with a recording session. Every
request gives up after `timeout_s`; a failed one raises the `warden.errors` class its status
calls for (a 403 stops, a 5xx or no answer is retried by Temporal, within bounds).

Escalation (repeated cordons) uses one of two repairs, chosen in the config:
- `report-faulty-host` (default): `instances.reportHostAsFaulty` with disruption IMMEDIATE.
  Compute Engine moves the VM to a healthy host in the same reservation and takes the host
  out of service; the node keeps its name and comes back through the recovery sweep.
- `recreate-instance`: `instanceGroupManagers.recreateInstances` on the node pool's managed
  instance group, what GKE node auto-repair itself does, without the host report.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from warden.errors import Fatal, api_error

COMPUTE = "https://compute.googleapis.com/compute/v1"
CONTAINER = "https://container.googleapis.com/v1"
REPAIRS = ("report-faulty-host", "recreate-instance")


@dataclass
class Instance:
    """The VM behind a GKE node (the node name is the instance name)."""

    project: str
    zone: str
    name: str
    pool: str = ""


class WardenGcp(Protocol):
    def reset(self, instance: Instance, request_id: str) -> None:
        """Hard-reset the VM (a reboot); a repeated request id is a no-op."""
        ...

    def repair(self, instance: Instance, reason: str, request_id: str) -> str:
        """Ask GCP to repair the VM; returns what was requested, for the event."""
        ...


def request_id(remediation_id: str, action: str) -> str:
    """A stable UUID per remediation and action: Compute Engine's idempotency key."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"warden/{remediation_id}/{action}"))


def instance_url(instance: Instance, compute: str = COMPUTE) -> str:
    return f"{compute}/projects/{instance.project}/zones/{instance.zone}/instances/{instance.name}"


def faulty_host_body(reason: str) -> dict[str, Any]:
    return {
        "disruptionSchedule": "IMMEDIATE",
        "faultReasons": [{"behavior": "UNRECOVERABLE_GPU_ERROR", "description": reason[:256]}],
    }


def _no_answer() -> tuple[type[BaseException], ...]:
    """What a call raises when no answer came (requests' errors are OSErrors)."""
    try:
        from google.auth.exceptions import GoogleAuthError
    except ImportError:
        return (OSError,)
    return (OSError, GoogleAuthError)


class RealGcp:
    """WardenGcp over REST; `session` is a `google.auth` AuthorizedSession (or alike);
    `compute` and `container` are the API roots (tests point them at a local server)."""

    def __init__(
        self, location: str, cluster: str, repair_method: str, session: Any = None,
        timeout_s: float = 20.0, compute: str = COMPUTE, container: str = CONTAINER,
    ):  # fmt: skip
        if session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(
                scopes=["https://www.googleapis.com/auth/cloud-platform"]
            )
            session = AuthorizedSession(credentials)
        self.session = session
        self.location = location
        self.cluster = cluster
        self.repair_method = repair_method
        self.timeout_s = timeout_s
        self.compute, self.container = compute, container

    def _send(self, method: str, url: str, body: dict | None = None) -> dict:
        call = f"{method} {url.partition('?')[0]}"
        try:
            response = self.session.request(method, url, json=body, timeout=self.timeout_s)
        except _no_answer() as err:  # requests' Timeout/ConnectionError, a token refresh
            raise api_error("gcp", call, None, f"{type(err).__name__}: {err}") from None
        if response.status_code >= 400:
            raise api_error("gcp", call, response.status_code, response.text)
        return response.json() if response.content else {}

    def reset(self, instance: Instance, request_id: str) -> None:
        url = instance_url(instance, self.compute)
        self._send("POST", f"{url}/reset?requestId={request_id}")

    def repair(self, instance: Instance, reason: str, request_id: str) -> str:
        if self.repair_method == "report-faulty-host":
            url = f"{instance_url(instance, self.compute)}/reportHostAsFaulty"
            self._send("POST", f"{url}?requestId={request_id}", faulty_host_body(reason))
            return f"reported the host of {instance.name} as faulty"
        mig = self._instance_group(instance)
        body = {"instances": [f"zones/{instance.zone}/instances/{instance.name}"]}
        self._send("POST", f"{mig}/recreateInstances?requestId={request_id}", body)
        return f"recreating {instance.name} in {mig.rsplit('/', 1)[-1]}"

    def _instance_group(self, instance: Instance) -> str:
        """The managed instance group of the node's pool in the node's zone."""
        pool = self._send(
            "GET",
            f"{self.container}/projects/{instance.project}/locations/{self.location}"
            f"/clusters/{self.cluster}/nodePools/{instance.pool}",
        )
        for url in pool.get("instanceGroupUrls", []):
            if f"/zones/{instance.zone}/" in url:
                return url.replace("/instanceGroups/", "/instanceGroupManagers/")
        raise Fatal(f"gcp: node pool {instance.pool} has no instance group in {instance.zone}")
