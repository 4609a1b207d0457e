"""The pods' grace period and the driver's final-save budget (catalog.saving): derived from
the model size and the measured save throughput, equal to the driver's stop deadline, and
what the rendered runs carry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from catalog.saving import (
    STOP_MARGIN_S,
    GraceError,
    GracePlan,
    grace_plan,
    save_seconds,
    stop_grace_s,
    throughput,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("params", "shards", "device", "preemptible", "expected"),
    [
        (None, 1, "H200", False, GracePlan(None, 25, 35)),  # the driver's default budget
        (None, 1, "H200", True, GracePlan(None, 15, 25)),  # a spot reclaim gives 15 s
        (0.4e6, 1, "H200", False, GracePlan(2.0, 10, 20, 0.0)),  # at least 10 s
        (7e9, 1, "H200", False, GracePlan(133.0, 134, 144, 84.0)),  # DDP: one pod writes all
        (7e9, 16, "H200", False, GracePlan(10.2, 11, 21, 5.25)),  # FSDP over 16 pods
        (1e8, 1, "cpu", True, GracePlan(5.15, 10, 20, 1.2)),
    ],
)
def test_grace_plan(params, shards, device, preemptible, expected):
    plan = grace_plan(params, shards, device, preemptible)
    assert (plan.budget_s, plan.grace_s) == (expected.budget_s, expected.grace_s)
    if expected.save_s is not None:
        assert plan.save_s == pytest.approx(expected.save_s, abs=0.1)
        assert plan.state_gb == pytest.approx(expected.state_gb, abs=0.01)
    assert stop_grace_s(plan.budget_s) == plan.grace_s  # the driver ends before SIGKILL


@pytest.mark.parametrize(
    ("params", "shards", "preemptible", "message"),
    [
        (2e9, 1, True, "over the 15 s GKE gives a pod on a spot node it reclaims"),
        (2e9, 4, True, None),  # sharded over 4 pods it fits
        (70e9, 1, False, "over the longest grace period, 900 s"),
        (70e9, 8, False, None),
    ],
)
def test_a_save_that_cannot_fit_is_refused(params, shards, preemptible, message):
    if message is None:
        grace_plan(params, shards, "H200", preemptible)
        return
    with pytest.raises(GraceError, match=message):
        grace_plan(params, shards, "H200", preemptible)


def test_every_row_says_how_it_was_measured_or_why_not():
    for device, row in throughput().items():
        assert row["staging_gb_s"] > 0 and row["write_gb_s"] > 0, device
        assert row.get("measured") or row.get("basis"), device


def test_save_seconds_is_staging_plus_write_with_the_safety_and_the_commit():
    seconds, gigabytes = save_seconds(1e9, 2, "cpu")
    row = throughput()["cpu"]
    assert gigabytes == 6.0
    assert seconds == pytest.approx((6 / row["staging_gb_s"] + 6 / row["write_gb_s"]) * 1.5 + 2)


def rendered(name: str) -> list[dict]:
    path = ROOT / "apps/ultra-usc1/research" / f"{name}.yaml"
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.mark.parametrize(("run", "budget"), [("tiny-lm", 10), ("tiny-lm-spot", 15)])
def test_rendered_pods_and_the_drivers_budget_agree(run, budget):
    job = next(doc for doc in rendered(run) if doc["kind"] == "RayJob")
    found = re.search(r"checkpoint\.preemption_budget_s=(\d+)", job["spec"]["entrypoint"])
    assert found and int(found.group(1)) == budget
    spec = job["spec"]["rayClusterSpec"]
    pods = [spec["headGroupSpec"]] + spec["workerGroupSpecs"]
    assert {p["template"]["spec"]["terminationGracePeriodSeconds"] for p in pods} == {
        int(budget + STOP_MARGIN_S)
    }
