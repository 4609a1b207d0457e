"""Table tests of the detection rules (pure: no server, no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from warden import annotations
from warden.fake import make_node
from warden.model import AMBIGUOUS, DEFINITE
from warden.rules import (
    GpuTelemetry,
    NodeFacts,
    RuleConfig,
    classify,
    due_for_recovery,
    node_facts,
    xid_severity,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NONE = GpuTelemetry()


def facts_with(conditions: dict[str, str]) -> NodeFacts:
    return NodeFacts("n", conditions=conditions)


RULES = RuleConfig(not_ready_grace_s=300, nvlink_errors=100, thermal_violation_s=60)


@pytest.mark.parametrize(
    ("code", "severity"),
    [(79, DEFINITE), (48, DEFINITE), (95, DEFINITE), (64, DEFINITE), (119, DEFINITE),
     (74, AMBIGUOUS), (94, AMBIGUOUS), (63, AMBIGUOUS), (999, AMBIGUOUS),
     (13, None), (31, None), (43, None), (45, None), (0, None)],
)  # fmt: skip
def test_xid_table(code, severity):
    assert xid_severity(code) == severity


@pytest.mark.parametrize(
    ("facts", "gpu", "severity", "reason_part"),
    [
        (NodeFacts("n"), GpuTelemetry(), None, None),
        (NodeFacts("n"), GpuTelemetry(xids=[79]), DEFINITE, "fallen off the bus"),
        (NodeFacts("n"), GpuTelemetry(xids=[13, 31]), None, None),
        (NodeFacts("n"), GpuTelemetry(xids=[74]), AMBIGUOUS, "XID 74"),
        (NodeFacts("n"), GpuTelemetry(xids=[74, 48]), DEFINITE, "XID 48"),
        (NodeFacts("n"), GpuTelemetry(ecc_dbe=2), DEFINITE, "double-bit ECC"),
        (NodeFacts("n"), GpuTelemetry(row_remap_failures=1), DEFINITE, "row remapping"),
        (NodeFacts("n"), GpuTelemetry(nvlink_errors=99), None, None),
        (NodeFacts("n"), GpuTelemetry(nvlink_errors=100), AMBIGUOUS, "NVLink"),
        (NodeFacts("n"), GpuTelemetry(thermal_violation_s=61), AMBIGUOUS, "thermal"),
        (NodeFacts("n", ready="False", ready_for_s=299), GpuTelemetry(), None, None),
        (NodeFacts("n", ready="False", ready_for_s=301), GpuTelemetry(), DEFINITE, "Ready=False"),
        (NodeFacts("n", ready="Unknown", ready_for_s=900), GpuTelemetry(), DEFINITE, "Unknown"),
        (facts_with({"KernelDeadlock": "DockerHung"}), NONE, DEFINITE, "KernelDeadlock"),
        (facts_with({"ReadonlyFilesystem": "FilesystemIsReadOnly"}), NONE, DEFINITE, "Readonly"),
        (facts_with({"FrequentKubeletRestart": "x"}), NONE, AMBIGUOUS, "Kubelet"),
        (facts_with({"GpuXidError": "Xid79"}), NONE, DEFINITE, "kernel log XID 79"),
        (facts_with({"GpuXidError": "Xid74"}), NONE, AMBIGUOUS, "kernel log XID 74"),
        (facts_with({"GpuXidError": "Xid13"}), NONE, None, None),
        (facts_with({"GpuXidError": "garbled"}), NONE, AMBIGUOUS, "garbled"),
        (facts_with({"SomethingElse": "x"}), NONE, None, None),
    ],
)  # fmt: skip
def test_classify(facts, gpu, severity, reason_part):
    finding = classify(facts, gpu, RULES, NOW)
    if severity is None:
        assert finding is None
    else:
        assert finding.severity == severity
        assert reason_part in finding.reason


@pytest.mark.parametrize(
    ("cleared_ago_s", "gpu", "expect"),
    [
        (60, GpuTelemetry(xids=[74]), None),  # cleared a minute ago: quiet
        (7200, GpuTelemetry(xids=[74]), AMBIGUOUS),  # quiet period over
        (60, GpuTelemetry(xids=[79]), DEFINITE),  # definite faults are never quiet
    ],
)
def test_recent_clear_quiets_ambiguous_findings(cleared_ago_s, gpu, expect):
    stamp = (NOW - timedelta(seconds=cleared_ago_s)).isoformat()
    facts = NodeFacts("n", annotations={annotations.CLEARED: stamp})
    finding = classify(facts, gpu, RuleConfig(cleared_quiet_s=3600), NOW)
    assert (finding.severity if finding else None) == expect


def test_node_facts_from_manifest():
    node = make_node("gpu-1")
    node["spec"]["unschedulable"] = True
    node["metadata"]["annotations"] = {annotations.REASON: "XID 79"}
    node["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T11:50:00Z"},
        {"type": "KernelDeadlock", "status": "True", "reason": "Hung"},
        {"type": "ReadonlyFilesystem", "status": "False", "reason": "Ok"},
    ]
    facts = node_facts(node, NOW)
    assert facts.ready == "False" and facts.ready_for_s == 600
    assert facts.conditions == {"KernelDeadlock": "Hung"}
    assert due_for_recovery(facts)
    boot = node["status"]["nodeInfo"]["bootID"]
    assert facts.boot_id == boot
    node["metadata"]["annotations"][annotations.ESCALATED] = f"r1 {boot}"
    assert not due_for_recovery(node_facts(node, NOW))


@pytest.mark.parametrize(
    ("repaired_ago_s", "facts_conditions", "gpu", "expect"),
    [
        (60, {}, GpuTelemetry(xids=[79]), None),  # figures from before the reboot: ignored
        (900, {}, GpuTelemetry(xids=[79]), DEFINITE),  # a new fault after the window
        (60, {"KernelDeadlock": "Hung"}, NONE, DEFINITE),  # conditions are current state
    ],
)
def test_recent_repair_quiets_stale_dcgm_figures(repaired_ago_s, facts_conditions, gpu, expect):
    stamp = (NOW - timedelta(seconds=repaired_ago_s)).isoformat()
    facts = NodeFacts("n", conditions=facts_conditions, annotations={annotations.REPAIRED: stamp})
    finding = classify(facts, gpu, RuleConfig(repaired_quiet_s=600), NOW)
    assert (finding.severity if finding else None) == expect


COPS = {annotations.REASON: "XID 79"}


@pytest.mark.parametrize(
    ("unschedulable", "notes", "ready", "boot", "due"),
    [
        (True, COPS, "True", "b1", True),  # cordoned by Warden: recover it
        (False, COPS, "True", "b1", False),  # uncordoned by hand
        (True, {}, "True", "b1", False),  # cordoned by someone else
        (True, COPS | {annotations.ESCALATED: "r1 b1"}, "True", "b1", False),  # GCP has it
        (True, COPS | {annotations.ESCALATED: "r1 b1"}, "True", "b2", True),  # back, new boot
        (True, COPS | {annotations.ESCALATED: "r1 b1"}, "Unknown", "b2", False),  # not Ready yet
        (True, COPS | {annotations.ESCALATED: "r1"}, "True", "b2", False),  # no boot id noted
    ],
)  # fmt: skip
def test_due_for_recovery(unschedulable, notes, ready, boot, due):
    facts = NodeFacts("n", ready=ready, unschedulable=unschedulable, annotations=notes)
    facts.boot_id = boot
    assert due_for_recovery(facts) is due
