"""The one rule for handing a persistent straggler's node to its node check, which the
straggler sweep and the gateway's POST /v1/stragglers both apply (`warden.handover`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from warden import annotations as ann
from warden.fakefleet import FakeCluster
from warden.fakeobjects import make_node
from warden.handover import screen, skip_reason

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
QUIET_S = 3600


def node_with(cordoned: bool = False, cleared: str | None = None, reason: bool = False) -> dict:
    node = make_node("n1")
    node["spec"]["unschedulable"] = cordoned
    notes = node["metadata"].setdefault("annotations", {})
    if cleared:
        notes[ann.CLEARED] = cleared
    if reason:
        notes[ann.REASON] = "XID 79"
    return node


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (node_with(), ""),
        (None, "gone"),
        (node_with(cordoned=True), "cordoned"),  # a person's or GKE's cordon
        (node_with(cordoned=True, reason=True), "cordoned"),  # Warden's: its recovery owns it
        (node_with(cordoned=True, cleared="2026-12-01T11:30:00+00:00"), "cordoned"),
        (node_with(cleared="2026-12-01T11:30:00+00:00"), "recently cleared"),
        (node_with(cleared="2026-12-01T11:00:00.000001+00:00"), "recently cleared"),
        (node_with(cleared="2026-12-01T11:00:00+00:00"), ""),  # exactly quiet_s ago
        (node_with(cleared="2026-12-01T10:00:00+00:00"), ""),
        (node_with(cleared=""), ""),
    ],
    ids=["healthy", "gone", "cordoned", "cordoned-by-warden", "cordoned-and-cleared",
         "cleared-30-min-ago", "cleared-just-under-1-h-ago", "cleared-1-h-ago",
         "cleared-2-h-ago", "empty-clear"],
)  # fmt: skip
def test_skip_reason(node, expected):
    assert skip_reason(node, NOW, quiet_s=QUIET_S) == expected


def test_screen_keeps_the_findings_of_nodes_handed_over_and_names_the_others():
    fleet = FakeCluster.create(nodes=3, prefix="hand")
    fresh, cleared, cordoned = (fleet.node_name(i) for i in range(3))
    now = datetime.now(UTC)
    fleet.kube.patch_node(cleared, None, {ann.CLEARED: now.isoformat()})
    fleet.kube.patch_node(cordoned, True, {})
    findings = [{"node": n, "rank": r}
                for r, n in enumerate([fresh, cleared, cordoned, "gone-node", fresh])]  # fmt: skip
    kept, skipped = screen(fleet.kube, findings, now, QUIET_S)
    assert kept == [findings[0], findings[4]]
    assert skipped == {cleared: "recently cleared", cordoned: "cordoned", "gone-node": "gone"}
    assert screen(fleet.kube, [], now, QUIET_S) == ([], {})
