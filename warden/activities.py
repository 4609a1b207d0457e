"""Warden's activities: every side effect on the cluster or GCP, each one idempotent.

Each activity reads the state it is about to change and acts only if this remediation (the
workflow run id) has not acted yet: a cordon is skipped when the node already carries this
remediation's id, a reboot is keyed by the remediation id (Compute Engine `requestId`) and
recorded with the boot id it replaces, Jobs and Events are named per remediation. So an
attempt retried after a worker crash never repeats a side effect. Every action writes a
Kubernetes Event and a telemetry record (`warden.telemetry`).

The worker registers `WardenActivities(...)` with real or fake adapters (`warden.worker`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from warden import annotations as ann
from warden import jobs, rules
from warden.control import ControlActivities
from warden.draining import DrainActivities
from warden.errors import Fatal, NotFound
from warden.faults import FailureActivities, log
from warden.gcp import WardenGcp
from warden.keep import KeepActivities
from warden.kube import Object, WardenKube, event_manifest, job_state, resource_version
from warden.model import (
    ActionResult,
    CordonResult,
    JobInput,
    JobRef,
    JobState,
    NodeAction,
    RecordInput,
)
from warden.prom import Prometheus
from warden.rebooting import RebootActivities
from warden.scaling import ScalingActivities
from warden.stragglers import StragglerActivities, StragglerSweep
from warden.telemetry import record


@dataclass
class Settings:
    """What the activities need besides the adapters (from WardenConfig and the catalog)."""

    cluster: str
    """cluster catalog name."""
    project: str
    """GCP project of the node VMs."""
    job_namespace: str = "warden"
    check_image: str = ""
    diag_image: str = ""
    job_deadline_s: int = 1800
    escalate_window_s: float = 7 * 86400
    rules: rules.RuleConfig = field(default_factory=rules.RuleConfig)


def _now() -> datetime:
    return datetime.now(UTC)


def _short(remediation_id: str) -> str:
    return hashlib.sha1(remediation_id.encode()).hexdigest()[:10]


class WardenActivities(
    ControlActivities,
    ScalingActivities,
    DrainActivities,
    RebootActivities,
    KeepActivities,
    FailureActivities,
    StragglerActivities,
):
    """Activities bound to one cluster's adapters and a telemetry sink."""

    def __init__(self, kube: WardenKube, gcp: WardenGcp, prom: Prometheus | None, sink, settings,
                 stragglers: StragglerSweep | None = None):  # fmt: skip
        self.kube, self.gcp, self.prom, self.sink, self.settings = kube, gcp, prom, sink, settings
        self.stragglers = stragglers

    # --- helpers ---------------------------------------------------------------------------

    def _node(self, name: str) -> Object:
        try:
            return self.kube.get_node(name)
        except NotFound:
            message = f"node {name} is gone"
            raise ApplicationError(message, type="NodeGone", non_retryable=True) from None

    def _emit(self, target: Object, rid: str, action: str, reason: str, detail: str = "",
              warning: bool = False, node: str | None = None) -> None:  # fmt: skip
        """One Kubernetes Event (named per remediation, so never twice) and one record. An
        Event the API server refuses for good (403, a namespace gone) is only logged: the
        action itself was taken, and the record says so."""
        name = f"{target['metadata']['name']}.warden-{action}-{_short(rid)}"
        message = f"{action}: {reason}" + (f" ({detail})" if detail else "")
        event = event_manifest(name, target, f"Warden{action.title()}", message, warning)
        try:
            self.kube.create_event(event)
        except (Fatal, NotFound) as err:
            log.warning("no Event for %s: %s", name, err)
        node_name = node or target["metadata"]["name"]
        self.sink.write(record(self.settings.cluster, node_name, action, reason, rid, detail))

    # --- cordon and uncordon ----------------------------------------------------------------

    @activity.defn
    def cordon(self, inp: NodeAction) -> CordonResult:
        node = self._node(inp.node)
        have = node["metadata"].get("annotations") or {}
        if have.get(ann.REMEDIATION) == inp.remediation_id:
            recent, changed = int(have.get(ann.CORDONS, "1")), False
        else:
            now = _now()
            last = have.get(ann.LAST_CORDON)
            within = last and (now - datetime.fromisoformat(last)).total_seconds() <= (
                self.settings.escalate_window_s
            )
            recent = int(have.get(ann.CORDONS, "0")) + 1 if within else 1
            patch = {
                ann.CORDONS: str(recent),
                ann.LAST_CORDON: now.isoformat(),
                ann.REASON: inp.reason,
            }
            patch |= {ann.REMEDIATION: inp.remediation_id, ann.REBOOT: None, ann.CLEARED: None}
            patch[ann.ESCALATED] = None
            node = self.kube.patch_node(inp.node, True, patch, resource_version(node))
            changed = True
        self._emit(node, inp.remediation_id, "cordon", inp.reason, f"{recent} recent", True)
        return CordonResult(inp.node, changed, recent)

    @activity.defn
    def uncordon(self, inp: NodeAction) -> ActionResult:
        node = self._node(inp.node)
        have = node["metadata"].get("annotations") or {}
        changed = False
        if ann.REASON in have or node["spec"].get("unschedulable"):
            clear = {ann.REASON: None, ann.REMEDIATION: None, ann.REBOOT: None, ann.ESCALATED: None}
            clear[ann.REPAIRED] = _now().isoformat()
            node = self.kube.patch_node(inp.node, False, clear, resource_version(node))
            changed = True
        self._emit(node, inp.remediation_id, "uncordon", inp.reason)
        return ActionResult(inp.node, changed)

    # --- node check and DCGM diag Jobs -------------------------------------------------------

    @activity.defn
    def start_job(self, inp: JobInput) -> JobRef:
        node = self._node(inp.node)
        s = self.settings
        if inp.kind == "check":
            job = jobs.check_job(
                s.cluster, node, s.check_image, s.job_namespace, inp.remediation_id
            )
        else:
            job = jobs.diag_job(
                node, inp.level, s.diag_image, s.job_namespace, inp.remediation_id, s.job_deadline_s
            )
        ref = JobRef(job["metadata"]["namespace"], job["metadata"]["name"])
        created = self.kube.create_job(job)
        self._emit(
            node,
            inp.remediation_id,
            inp.kind,
            f"started Job {ref.name}",
            "" if created else "exists",
        )
        return ref

    @activity.defn
    def job_status(self, ref: JobRef) -> JobState:
        return JobState(job_state(self.kube.get_job(ref.namespace, ref.name)))

    # --- records ----------------------------------------------------------------------------

    @activity.defn
    def record(self, inp: RecordInput) -> ActionResult:
        """A decision without a side effect (cleared, busy) as an Event and a record."""
        node = self._node(inp.node)
        if inp.action == "clear":
            node = self.kube.patch_node(inp.node, None, {ann.CLEARED: _now().isoformat()})
        self._emit(node, inp.remediation_id, inp.action, inp.reason)
        return ActionResult(inp.node, True)
