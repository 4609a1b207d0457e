"""Detection rules: GPU telemetry, node conditions and readiness -> definite or ambiguous.

Pure functions only; `tests/warden/test_rules.py` holds the tables. A definite fault cordons
the node at once; an ambiguous one runs the node check Job first; `None` means healthy.

XID codes follow NVIDIA's XID catalog: hardware faults that need a reset or a new host are
definite, application faults (page faults, engine exceptions) are ignored, the rest (NVLink,
contained ECC, pending row remaps) are ambiguous until the node check says otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from catalog import labels
from warden import annotations
from warden.model import AMBIGUOUS, DEFINITE, Finding

DEFINITE_XIDS = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    64: "row remapping failure",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
IGNORED_XIDS = {
    13: "graphics engine exception",
    31: "memory page fault",
    43: "GPU stopped",
    45: "preemptive cleanup",
}

# node-problem-detector conditions (its standard kernel monitor, plus our GPU XID rule).
DEFINITE_CONDITIONS = ("KernelDeadlock", "ReadonlyFilesystem")
AMBIGUOUS_CONDITIONS = ("FrequentKubeletRestart", "FrequentContainerdRestart")
XID_CONDITION = "GpuXidError"
"""condition our node-problem-detector rule sets on `NVRM: Xid` kernel lines (reason Xid<code>)."""


@dataclass
class RuleConfig:
    """Thresholds of the detection rules."""

    __pydantic_config__ = {"extra": "forbid"}  # the config file rejects unknown keys

    not_ready_grace_s: float = 300.0
    """a node NotReady (or Unknown) longer than this is definitely faulty."""
    nvlink_errors: float = 100.0
    """NVLink CRC/replay/recovery errors within the query window that make a node suspect."""
    thermal_violation_s: float = 60.0
    """seconds of thermal throttling within the window that make a node suspect."""
    cleared_quiet_s: float = 3600.0
    """after a node check clears a node, ambiguous findings are ignored this long."""
    repaired_quiet_s: float = 600.0
    """after a repair, DCGM figures are ignored this long: keep it >= the PromQL window, so
    faults from before the reboot do not cordon the repaired node again."""


@dataclass
class GpuTelemetry:
    """DCGM exporter figures of one node over the query window."""

    xids: list[int] = field(default_factory=list)
    ecc_dbe: float = 0.0
    row_remap_failures: float = 0.0
    nvlink_errors: float = 0.0
    thermal_violation_s: float = 0.0


@dataclass
class NodeFacts:
    """What Kubernetes says about one node, reduced to what the rules read."""

    name: str
    ready: str = "True"
    """status of the Ready condition: True, False or Unknown."""
    ready_for_s: float = 0.0
    """seconds since the Ready condition last changed."""
    conditions: dict[str, str] = field(default_factory=dict)
    """type -> reason, for every condition other than Ready whose status is True."""
    unschedulable: bool = False
    annotations: dict[str, str] = field(default_factory=dict)
    boot_id: str = ""
    """`status.nodeInfo.bootID`: changes whenever the machine boots."""


def xid_severity(code: int) -> str | None:
    if code in IGNORED_XIDS or code == 0:
        return None
    return DEFINITE if code in DEFINITE_XIDS else AMBIGUOUS


def xid_text(code: int) -> str:
    name = DEFINITE_XIDS.get(code) or IGNORED_XIDS.get(code)
    return f"XID {code} ({name})" if name else f"XID {code}"


def telemetry_signals(gpu: GpuTelemetry, rules: RuleConfig) -> list[tuple[str, str]]:
    """(severity, reason) for every fault the DCGM figures show."""
    found = []
    for code in sorted(set(gpu.xids)):
        severity = xid_severity(code)
        if severity:
            found.append((severity, xid_text(code)))
    if gpu.ecc_dbe > 0:
        found.append((DEFINITE, f"{gpu.ecc_dbe:g} double-bit ECC errors"))
    if gpu.row_remap_failures > 0:
        found.append((DEFINITE, "row remapping failed"))
    if gpu.nvlink_errors >= rules.nvlink_errors:
        found.append((AMBIGUOUS, f"{gpu.nvlink_errors:g} NVLink errors"))
    if gpu.thermal_violation_s >= rules.thermal_violation_s:
        found.append((AMBIGUOUS, f"{gpu.thermal_violation_s:g}s thermal violation"))
    return found


def node_signals(facts: NodeFacts, rules: RuleConfig) -> list[tuple[str, str]]:
    """(severity, reason) from readiness and node-problem-detector conditions."""
    found = []
    if facts.ready != "True" and facts.ready_for_s >= rules.not_ready_grace_s:
        found.append((DEFINITE, f"node Ready={facts.ready} for {facts.ready_for_s:.0f}s"))
    for kind, reason in sorted(facts.conditions.items()):
        if kind in DEFINITE_CONDITIONS:
            found.append((DEFINITE, f"{kind}: {reason}"))
        elif kind in AMBIGUOUS_CONDITIONS:
            found.append((AMBIGUOUS, f"{kind}: {reason}"))
        elif kind == XID_CONDITION:
            code = int(reason.removeprefix("Xid")) if reason.removeprefix("Xid").isdigit() else -1
            severity = xid_severity(code) if code >= 0 else AMBIGUOUS
            if severity:
                found.append((severity, f"kernel log {xid_text(code) if code >= 0 else reason}"))
    return found


def classify(
    facts: NodeFacts, gpu: GpuTelemetry, rules: RuleConfig, now: datetime
) -> Finding | None:
    """The finding for one node, or None when healthy (or recently cleared by a check)."""
    signals = node_signals(facts, rules)
    if not since(facts, annotations.REPAIRED, rules.repaired_quiet_s, now):
        signals += telemetry_signals(gpu, rules)
    definite = [reason for severity, reason in signals if severity == DEFINITE]
    if definite:
        return Finding(facts.name, DEFINITE, definite)
    if not signals or since(facts, annotations.CLEARED, rules.cleared_quiet_s, now):
        return None
    return Finding(facts.name, AMBIGUOUS, [reason for _, reason in signals])


def finding_for(facts: NodeFacts, gpu: GpuTelemetry, rules: RuleConfig, now: datetime):
    """What detection concludes about a GPU node: None for a cordoned node (Warden's to
    recover, or a person's or GKE's: not ours) or a healthy one; else `classify`."""
    return None if facts.unschedulable else classify(facts, gpu, rules, now)


def node_finding(node: dict, rules: RuleConfig, now: datetime) -> Finding | None:
    """The finding of a Node manifest as a watch sees it (conditions and readiness; DCGM
    figures are the sweep's), or None (not a GPU node, cordoned, healthy)."""
    if not is_gpu_node(node):
        return None
    return finding_for(node_facts(node, now), GpuTelemetry(), rules, now)


XID_LINE = re.compile(r"(?:NVRM: Xid \([^)]*\): |^Xid ?)(\d+)")
EVENT_MAX_AGE_S = 300.0
"""Node Events older than this are history, not news (a watch that starts again replays)."""


def event_signal(reason: str, message: str) -> tuple[str, str] | None:
    """(severity, reason) of a node-problem-detector Event on a Node, or None."""
    if reason in DEFINITE_CONDITIONS:
        return DEFINITE, f"{reason}: {message}".strip()
    if reason in AMBIGUOUS_CONDITIONS:
        return AMBIGUOUS, f"{reason}: {message}".strip()
    found = XID_LINE.search(message) or XID_LINE.search(reason)
    if found or reason == XID_CONDITION:
        if not found:
            return AMBIGUOUS, f"kernel log {message or reason}".strip()
        code = int(found.group(1))
        severity = xid_severity(code)
        return (severity, f"kernel log {xid_text(code)}") if severity else None
    return None


def event_finding(event: dict, now: datetime) -> Finding | None:
    """The finding of a recent Event about a GPU node's health (node-problem-detector's),
    or None: not about a Node, Warden's own, old, or not a fault."""
    involved = event.get("involvedObject") or {}
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
    if involved.get("kind") != "Node" or source == "warden" or not involved.get("name"):
        return None
    stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
    if stamp:
        moment = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        if (now - moment).total_seconds() > EVENT_MAX_AGE_S:
            return None
    signal = event_signal(str(event.get("reason", "")), str(event.get("message", "")))
    if signal is None:
        return None
    return Finding(involved["name"], signal[0], [signal[1]])


def since(facts: NodeFacts, annotation: str, quiet_s: float, now: datetime) -> bool:
    """The time in `annotation` lies less than `quiet_s` before `now`."""
    stamp = facts.annotations.get(annotation)
    if not stamp:
        return False
    return (now - datetime.fromisoformat(stamp)).total_seconds() < quiet_s


def cordoned_by_warden(facts: NodeFacts) -> bool:
    return facts.unschedulable and annotations.REASON in facts.annotations


def due_for_recovery(facts: NodeFacts) -> bool:
    """Cordoned by Warden, and not handed to GCP or back from GCP's repair (booted anew and
    Ready): the recovery sweep takes it."""
    if not cordoned_by_warden(facts):
        return False
    escalated = facts.annotations.get(annotations.ESCALATED)
    if escalated is None:
        return True
    before = escalated.partition(" ")[2]
    return facts.ready == "True" and bool(before) and before != facts.boot_id


def node_facts(node: dict, now: datetime) -> NodeFacts:
    """Reduce a Node manifest to the facts the rules read."""
    meta = node.get("metadata", {})
    facts = NodeFacts(
        name=meta["name"],
        unschedulable=bool(node.get("spec", {}).get("unschedulable")),
        annotations=dict(meta.get("annotations") or {}),
        boot_id=node.get("status", {}).get("nodeInfo", {}).get("bootID", ""),
    )
    for cond in node.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            facts.ready = cond.get("status", "Unknown")
            since = cond.get("lastTransitionTime")
            if since:
                moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
                facts.ready_for_s = max(0.0, (now - moment).total_seconds())
        elif cond.get("status") == "True":
            facts.conditions[cond["type"]] = cond.get("reason", "")
    return facts


def is_gpu_node(node: dict) -> bool:
    return labels.GKE_ACCELERATOR in (node.get("metadata", {}).get("labels") or {})
