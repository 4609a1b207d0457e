"""Activities called directly on the fake cluster: each side effect happens once per
remediation, however often (or however concurrently) its activity is attempted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.warden.conftest import settings
from warden import annotations as ann
from warden.activities import WardenActivities
from warden.fakefleet import FakeCluster
from warden.kube import Conflict
from warden.model import DetectInput, DetectResult, NodeAction
from warden.prom import PromError
from warden.telemetry import MemorySink


@pytest.fixture
def setup():
    fleet = FakeCluster.create(nodes=1, reboot_s=0.0)
    sink = MemorySink()
    acts = WardenActivities(fleet.kube, fleet.gcp, fleet.prom, sink, settings())
    return fleet, acts, sink, fleet.node_name(0)


def test_a_retried_cordon_changes_nothing(setup):
    fleet, acts, sink, node = setup
    first = acts.cordon(NodeAction(node, "r1", "XID 79"))
    again = acts.cordon(NodeAction(node, "r1", "XID 79"))
    assert (first.changed, again.changed) == (True, False)
    assert first.recent_cordons == again.recent_cordons == 1
    assert fleet.counts("cordon") == {node: 1}
    assert len(fleet.events("WardenCordon")) == 1  # the Event is named per remediation


def test_an_attempt_that_read_the_node_before_another_cordoned_it_conflicts(setup):
    fleet, acts, sink, node = setup
    stale = fleet.kube.get_node(node)  # attempt 1 reads the node, then stalls past its timeout
    acts.cordon(NodeAction(node, "r1", "XID 79"))  # attempt 2 cordons
    real_get = fleet.kube.get_node
    fleet.kube.get_node = lambda name: stale  # attempt 1 goes on with what it read
    with pytest.raises(Conflict):
        acts.cordon(NodeAction(node, "r1", "XID 79"))
    fleet.kube.get_node = real_get
    assert fleet.counts("cordon") == {node: 1}
    assert fleet.node(node)["metadata"]["annotations"][ann.CORDONS] == "1"


def test_a_retried_reboot_resets_once_and_keeps_the_boot_id_it_replaced(setup):
    fleet, acts, sink, node = setup
    before = fleet.node(node)["status"]["nodeInfo"]["bootID"]
    acts.cordon(NodeAction(node, "r1", "XID 79"))
    assert acts.reboot(NodeAction(node, "r1")).changed
    acts.reboot(NodeAction(node, "r1"))
    assert fleet.counts("reboot") == {node: 1}
    assert fleet.node(node)["metadata"]["annotations"][ann.REBOOT] == f"r1 {before}"
    assert acts.boot_state(NodeAction(node, "r1")).rebooted


def test_a_retried_escalation_repairs_once(setup):
    fleet, acts, sink, node = setup
    before = fleet.node(node)["status"]["nodeInfo"]["bootID"]
    acts.cordon(NodeAction(node, "r1", "XID 79"))
    first = acts.escalate(NodeAction(node, "r1", "3 cordons"))
    again = acts.escalate(NodeAction(node, "r1", "3 cordons"))
    assert (first.changed, again.changed) == (True, False)
    assert fleet.counts("repair") == {node: 1}
    assert fleet.node(node)["metadata"]["annotations"][ann.ESCALATED] == f"r1 {before}"
    assert [r.action for r in sink.records] == ["cordon", "escalate", "escalate"]
    assert {r.id for r in sink.records} == {"r1/cordon", "r1/escalate"}  # one row each


def test_a_new_cordon_after_an_escalation_starts_afresh(setup):
    fleet, acts, sink, node = setup
    acts.cordon(NodeAction(node, "r1", "XID 79"))
    acts.escalate(NodeAction(node, "r1", "diag failed"))
    fleet.kube.patch_node(node, False, {})  # `kubectl uncordon` by a person
    acts.cordon(NodeAction(node, "r3", "XID 48"))  # a new fault: a new remediation
    notes = fleet.node(node)["metadata"]["annotations"]
    assert notes[ann.CORDONS] == "2" and notes[ann.REMEDIATION] == "r3"
    assert ann.ESCALATED not in notes  # the recovery sweep takes it again


class DownPrometheus:
    def gpu_telemetry(self):
        raise PromError("http://prometheus:9090: connection refused")


def test_detection_goes_on_from_node_conditions_while_prometheus_is_down(setup):
    fleet, acts, sink, node = setup
    fleet.set_condition(node, "KernelDeadlock", "TaskHung")
    acts.prom = DownPrometheus()
    (finding,) = acts.detect(DetectInput(0)).findings
    assert (finding.node, finding.severity) == (node, "definite")


def test_a_node_someone_else_cordoned_is_left_alone(setup):
    fleet, acts, sink, node = setup
    fleet.set_metrics(node, xids=[79])
    fleet.kube.patch_node(node, True, {})  # `kubectl cordon` by a person, or a GKE upgrade
    assert acts.detect(DetectInput(0)) == DetectResult()
    fleet.kube.patch_node(node, False, {})
    assert [f.node for f in acts.detect(DetectInput(0)).findings] == [node]


@pytest.mark.parametrize(
    ("earlier", "last_ago_h", "recent"),
    [(None, None, 1), ("1", 1, 2), ("2", 24 * 6, 3), ("2", 24 * 8, 1)],  # window: 7 days
)
def test_cordons_count_within_the_escalation_window(setup, earlier, last_ago_h, recent):
    fleet, acts, sink, node = setup
    if earlier:
        last = (datetime.now(UTC) - timedelta(hours=last_ago_h)).isoformat()
        fleet.kube.patch_node(node, None, {ann.CORDONS: earlier, ann.LAST_CORDON: last})
    assert acts.cordon(NodeAction(node, "r9", "XID 79")).recent_cordons == recent
    assert fleet.node(node)["metadata"]["annotations"][ann.CORDONS] == str(recent)
