"""The Warden layer's check (tests/soak/warden_check.py): workflow runs counted by workflow
ID against the faults injected, their outcomes, stress tests and side effects."""

from __future__ import annotations

import pytest

from tests.soak.warden import fleet_fault_every
from tests.soak.warden_check import settled, verdict

FAULTS = [
    {"node": "gpu-0000", "kind": "XID 79", "expected": "uncordoned"},
    {"node": "gpu-0001", "kind": "NVLink errors, check passes", "expected": "cleared"},
]


def run(wid: str, status: str = "COMPLETED", outcome: str | None = None, n: int = 1) -> dict:
    kind = "StressTestWorkflow" if wid.startswith("stress-") else "NodeWorkflow"
    found = {"id": wid, "run_id": f"{wid}-r{n}", "type": kind, "status": status}
    return found | ({"outcome": outcome} if outcome else {})


def healthy() -> list[dict]:
    """What a good soak lists: each fault's workflow once, one stress test for the repair,
    the periodic sweep running after a worker restart terminated its first run."""
    return [
        run("node-gpu-0000", outcome="uncordoned"),
        run("stress-gpu-0000", outcome="passed"),
        run("node-gpu-0001", outcome="cleared"),
        run("warden-sweep-ultra-usc1", "TERMINATED"),
        run("warden-sweep-ultra-usc1", "RUNNING", n=2),
    ]


EFFECTS = {"cordon": {"gpu-0000": 1}, "reboot": {"gpu-0000": 1}, "uncordon": {"gpu-0000": 1}}


def test_each_fault_repaired_once_passes_and_says_how():
    ok, text = verdict(FAULTS, healthy(), EFFECTS)
    assert ok, text
    said = "2 faults on the fleet, each repaired by one workflow that completed (1 cleared, "
    assert text.startswith(said + "1 uncordoned), side effects once each; 0 no-op recovery")
    assert text.endswith("periodic runs: 1 running, 1 terminated")


@pytest.mark.parametrize(
    ("change", "effects", "problem"),
    [
        (lambda f: f.remove(f[2]), EFFECTS, "gpu-0001 (NVLink errors, check passes): no workflow"),
        (lambda f: f.append(run("node-gpu-0000", outcome="uncordoned", n=2)), EFFECTS,
         "gpu-0000 (XID 79): 2 workflows acted: COMPLETED uncordoned, COMPLETED uncordoned"),
        (lambda f: f.__setitem__(2, run("node-gpu-0001", "RUNNING")), EFFECTS,
         "gpu-0001 (NVLink errors, check passes): its workflow is RUNNING"),
        (lambda f: f.__setitem__(2, run("node-gpu-0001", "TERMINATED")), EFFECTS,
         "gpu-0001 (NVLink errors, check passes): its workflow is TERMINATED"),
        (lambda f: f.__setitem__(0, run("node-gpu-0000", outcome="failed")), EFFECTS,
         "gpu-0000 (XID 79): outcome failed, expected uncordoned"),
        (lambda f: f.remove(f[1]), EFFECTS,
         "gpu-0000: 0 stress tests (none), expected 1 passed"),
        (lambda f: f.append(run("stress-gpu-0000", outcome="passed", n=2)), EFFECTS,
         "gpu-0000: 2 stress tests (COMPLETED passed, COMPLETED passed), expected 1 passed"),
        (lambda f: f.append(run("stress-gpu-0001", "FAILED")), EFFECTS,
         "gpu-0001: 1 stress tests (FAILED), expected 0 passed"),
        (lambda f: None, {**EFFECTS, "reboot": {"gpu-0000": 2}},
         "gpu-0000: reboot 2 times, expected 1"),
        (lambda f: None, {**EFFECTS, "cordon": {"gpu-0000": 1, "gpu-0001": 1}},
         "gpu-0001: cordon 1 times, expected 0"),
        (lambda f: f.append(run("node-gpu-0007", outcome="uncordoned")), EFFECTS,
         "node-gpu-0007: a workflow for a node with no fault"),
        (lambda f: f.append(run("warden-grow-ultra-usc1", "FAILED")), EFFECTS,
         "warden-grow-ultra-usc1: FAILED"),
    ],
)  # fmt: skip
def test_a_fault_repaired_twice_or_never_or_badly_fails(change, effects, problem):
    found = healthy()
    change(found)
    ok, text = verdict(FAULTS, found, effects)
    assert not ok
    assert f"\n    {problem}" in text, text


def test_a_no_op_recovery_run_is_counted_not_failed():
    """A recovery run started from a sweep that read the node cordoned just before the
    repair's uncordon finds it released and does nothing (warden.workflows)."""
    found = [*healthy(), run("node-gpu-0000", outcome="released", n=2)]
    ok, text = verdict(FAULTS, found, EFFECTS)
    assert ok, text
    assert "1 no-op recovery runs (released)" in text
    running = [*healthy(), run("node-gpu-0000", "RUNNING", n=2)]  # not yet known to be one
    assert not verdict(FAULTS, running, EFFECTS)[0]


def test_the_layer_s_own_problems_fail_the_check():
    ok, text = verdict(FAULTS, healthy(), EFFECTS, ["the Warden worker exited 1 after SIGTERM"])
    assert not ok
    assert text == "1 problems of 2 faults\n    the Warden worker exited 1 after SIGTERM"


@pytest.mark.parametrize(
    ("found", "done"),
    [
        (healthy(), True),
        (healthy()[:2], False),  # gpu-0001 has no workflow yet
        ([*healthy(), run("stress-gpu-0001", "RUNNING")], False),
        ([*healthy(), run("warden-keep-ultra-usc1", "RUNNING")], True),  # periodic: runs on
    ],
)
def test_the_wait_ends_when_every_fault_has_a_workflow_and_none_runs(found, done):
    assert settled(FAULTS, found) is done


@pytest.mark.parametrize(("minutes", "every"), [(1.5, 6.0), (6, 6.0), (30, 30.0)])
def test_a_long_soak_spaces_the_fleet_s_faults_to_at_most_sixty(minutes, every):
    assert fleet_fault_every(minutes) == every
