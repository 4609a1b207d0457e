"""Kept nodes (`keep_nodes`): Warden watches the nodes of a RayJob that asks for it, keeps
them for the namespace once its pods are gone, and releases them when the time is up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runner import keepnodes
from tests.warden.conftest import FAST, Harness, settings
from warden import keep
from warden.activities import WardenActivities
from warden.fakefleet import FakeCluster
from warden.fakeobjects import make_node, make_pod
from warden.model import KeepInput, Timings, keep_workflow_id
from warden.telemetry import MemorySink
from warden.workflows import KeepWorkflow

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(notes: dict | None = None, kept: str | None = None, taints=None) -> dict:
    obj = make_node("gpu-0000")
    obj["metadata"]["annotations"] = dict(notes or {})
    if kept:
        obj["metadata"]["labels"][keepnodes.KEPT_FOR] = kept
    obj["spec"]["taints"] = list(taints or [GPU_TAINT])
    return obj


UNTIL_LATER = (NOW + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
UNTIL_PAST = (NOW - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
KEPT_TAINTS = [GPU_TAINT, keepnodes.taint("research")]


def kept(until: str) -> dict:
    return node({keep.KEPT_UNTIL: until}, "research", KEPT_TAINTS)


@pytest.mark.parametrize(
    ("obj", "request_", "busy", "action"),
    [
        (node(), None, False, None),  # plain node, nobody asks
        (node(), ("research", 1800), False, "watch"),
        (node({keep.KEEP_FOR: "research 1800"}), ("research", 1800), False, None),
        (node({keep.KEEP_FOR: "research 1800"}), None, False, "keep"),  # the pods are gone
        (kept(UNTIL_LATER), None, False, None),
        (kept(UNTIL_PAST), None, False, "release"),
        (kept(UNTIL_LATER), None, True, "release"),
        (kept(UNTIL_LATER), ("research", 60), False, "watch"),
        (node({}, None, KEPT_TAINTS), None, False, "release"),  # a taint left behind
    ],
)  # fmt: skip
def test_reconcile(obj, request_, busy, action):
    change = keep.reconcile(obj, request_, busy, NOW)
    assert (change.action if change else None) == action


def test_keeping_taints_and_labels_for_the_namespace_and_keeps_other_taints():
    change = keep.reconcile(node({keep.KEEP_FOR: "research 1800"}), None, False, NOW)
    assert change.labels == {keepnodes.KEPT_FOR: "research"}
    assert change.taints == [GPU_TAINT, keepnodes.taint("research")]
    assert change.annotations[keep.KEPT_UNTIL] == "2026-12-01T12:30:00Z"
    released = keep.reconcile(kept(UNTIL_PAST), None, False, NOW)
    assert released.taints == [GPU_TAINT] and released.labels == {keepnodes.KEPT_FOR: None}
    assert released.annotations == {keep.KEEP_FOR: None, keep.KEPT_UNTIL: None}


def test_requests_count_only_active_marked_pods():
    running = make_pod("w0", "research", "gpu-0000", keep_s=600)
    done = make_pod("w1", "research", "gpu-0001", keep_s=600)
    done["status"]["phase"] = "Succeeded"
    leaving = make_pod("w2", "research", "gpu-0002", keep_s=600)
    leaving["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    assert keep.requests([running, done, leaving]) == {"gpu-0000": ("research", 600)}


@pytest.fixture
def setup(monkeypatch):
    fleet = FakeCluster.create(nodes=2, reboot_s=0.0)
    acts = WardenActivities(fleet.kube, fleet.gcp, fleet.prom, MemorySink(), settings())
    clock = {"now": NOW}
    monkeypatch.setattr(keep, "_now", lambda: clock["now"])
    return fleet, acts, clock


def kept_for(fleet: FakeCluster, name: str) -> tuple[str | None, list[str]]:
    obj = fleet.node(name)
    taints = [t["key"] for t in obj["spec"].get("taints", [])]
    return obj["metadata"]["labels"].get(keepnodes.KEPT_FOR), taints


def test_warden_releases_the_kept_node_when_the_time_is_up(setup):
    fleet, acts, clock = setup
    a, b = fleet.node_name(0), fleet.node_name(1)
    fleet.add_pod("lm-worker-0", "research", a, keep_s=1800)
    fleet.add_pod("other", "vision", b)
    assert acts.keep_nodes(KeepInput(FAST)).watched == 1
    assert acts.keep_nodes(KeepInput(FAST)).watched == 0  # nothing to change: no patch
    assert kept_for(fleet, a) == (None, [])
    fleet.delete_pod("research", "lm-worker-0")  # the RayJob ended
    assert acts.keep_nodes(KeepInput(FAST)).kept == 1
    assert kept_for(fleet, a) == ("research", [keepnodes.KEPT_FOR])
    assert kept_for(fleet, b) == (None, [])
    clock["now"] = NOW + timedelta(minutes=29)
    assert acts.keep_nodes(KeepInput(FAST)).released == 0
    clock["now"] = NOW + timedelta(minutes=30, seconds=1)
    assert acts.keep_nodes(KeepInput(FAST)).released == 1
    assert kept_for(fleet, a) == (None, [])
    assert not fleet.node(a)["metadata"]["annotations"]
    assert [e["reason"] for e in fleet.events()] == [
        "WardenKeep-Watch", "WardenKeep-Keep", "WardenKeep-Release",
    ]  # fmt: skip


def test_a_relaunch_in_the_namespace_takes_the_kept_node(setup):
    fleet, acts, clock = setup
    a = fleet.node_name(0)
    fleet.add_pod("lm-worker-0", "research", a, keep_s=1800)
    acts.keep_nodes(KeepInput(FAST))
    fleet.delete_pod("research", "lm-worker-0")
    acts.keep_nodes(KeepInput(FAST))
    fleet.add_pod("lm2-worker-0", "research", a)  # the relaunch, without keep_nodes
    assert acts.keep_nodes(KeepInput(FAST)).released == 1
    assert kept_for(fleet, a) == (None, [])


def test_a_stale_read_changes_nothing_this_round(setup):
    fleet, acts, clock = setup
    a = fleet.node_name(0)
    fleet.add_pod("lm-worker-0", "research", a, keep_s=1800)
    stale = fleet.kube.list_nodes()
    fleet.kube.patch_node(a, None, {"someone": "else"})  # the node changes after the read
    fleet.kube.list_nodes = lambda: stale
    assert acts.keep_nodes(KeepInput(FAST)).watched == 0
    assert keep.KEEP_FOR not in fleet.node(a)["metadata"]["annotations"]


def test_the_keep_workflow_keeps_then_releases(temporal_address, fleet):
    timings = Timings(**{**vars(FAST), "keep_period_s": 0.2})
    harness = Harness(temporal_address, fleet, timings)
    a = fleet.node_name(0)
    fleet.add_pod("lm-worker-0", "research", a, keep_s=1)

    async def body(h: Harness):
        first = await h.client.execute_workflow(
            KeepWorkflow.run, KeepInput(timings, 1), id=keep_workflow_id(h.queue),
            task_queue=h.queue,
        )  # fmt: skip
        fleet.delete_pod("research", "lm-worker-0")
        rest = await h.client.execute_workflow(
            KeepWorkflow.run, KeepInput(timings, 15), id=keep_workflow_id(h.queue) + "-2",
            task_queue=h.queue,
        )  # fmt: skip
        return first, rest

    first, rest = harness.run(body)
    assert (first.watched, rest.kept, rest.released) == (1, 1, 1)
    assert kept_for(fleet, a) == (None, [])


def test_a_stray_taint_is_released(setup):
    fleet, acts, clock = setup
    a = fleet.node_name(0)
    obj = fleet.node(a)
    fleet.kube.set_node_keep(a, {}, {}, [keepnodes.taint("research")], None)
    assert keepnodes.KEPT_FOR not in obj["metadata"]["labels"]
    assert acts.keep_nodes(KeepInput(FAST)).released == 1
    assert kept_for(fleet, a) == (None, [])
