"""Table tests: which workloads block a reboot and which may be drained."""

from __future__ import annotations

import pytest

from catalog import labels
from warden.fake import make_pod
from warden.workloads import classify, owner_key

PRE, DEF, HIGH = labels.PRIORITY_PREEMPTIBLE, labels.PRIORITY_DEFAULT, labels.PRIORITY_HIGH


def pod(name, ns="research", node="n1", priority=PRE, run=None, owner=None, **extra):
    p = make_pod(name, ns, node, priority=priority, run=run, owner=owner)
    p["metadata"].update(extra.get("meta", {}))
    p["status"].update(extra.get("status", {}))
    return p


R1 = ("research", "Run", "r1")
CASES = [
    # (pods on n1, sibling nodes per key, blocking names, drainable names, terminating)
    ([], {}, [], [], 0),
    ([pod("a", run="r1")], {("research", "Run", "r1"): {"n1"}}, [], ["r1"], 0),
    ([pod("a", run="r1", priority=DEF)], {("research", "Run", "r1"): {"n1"}}, ["r1"], [], 0),
    ([pod("a", run="r1", priority=HIGH)], {("research", "Run", "r1"): {"n1"}}, ["r1"], [], 0),
    ([pod("a", run="r1")], {("research", "Run", "r1"): {"n1", "n2"}}, ["r1"], [], 0),
    ([pod("a", run="r1")], {}, ["r1"], [], 0),  # siblings unknown: never drained on a guess
    ([pod("a", run="r1"), pod("b", run="r1", priority=DEF)], {R1: {"n1"}}, ["r1"], [], 0),
    ([pod("a", owner=("Job", "j1"))], {("research", "Job", "j1"): {"n1"}}, [], ["j1"], 0),
    ([pod("ds", owner=("DaemonSet", "dcgm"), priority=DEF)], {}, [], [], 0),
    ([pod("sys", ns="kube-system", priority=DEF)], {}, [], [], 0),
    ([pod("chk", ns="warden", priority=DEF)], {}, [], [], 0),
    ([pod("done", priority=DEF, status={"phase": "Succeeded"})], {}, [], [], 0),
    ([pod("bye", priority=DEF, meta={"deletionTimestamp": "2026-11-30T12:00:00Z"})], {}, [], [], 1),
]  # fmt: skip


@pytest.mark.parametrize(("pods", "siblings", "blocking", "drainable", "terminating"), CASES)
def test_classify(pods, siblings, blocking, drainable, terminating):
    report = classify("n1", pods, siblings, warden_namespace="warden")
    assert [w.name for w in report.blocking] == blocking
    assert [w.name for w in report.drainable] == drainable
    assert report.terminating == terminating


def test_owner_key_prefers_run_label_then_controller():
    assert owner_key(pod("a", run="r1", owner=("RayCluster", "rc"))) == ("research", "Run", "r1")
    assert owner_key(pod("a", owner=("RayCluster", "rc"))) == ("research", "RayCluster", "rc")
    assert owner_key(pod("a")) == ("research", "Pod", "a")
