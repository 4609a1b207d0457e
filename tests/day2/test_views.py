"""The pure parts of the day-2 commands: ages, object states, rank order."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from catalog import labels
from runner.commands._day2 import COMPLETION_INDEX, ranked
from runner.commands._day2_views import age, state_of

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("timestamp", "shown"),
    [
        (None, "-"),
        ("2026-11-30T11:59:15Z", "45s"),
        ("2026-11-30T11:48:00Z", "12m"),
        ("2026-11-30T09:00:00+00:00", "3h"),
        ("2026-11-28T11:00:00Z", "2d"),
        ("2026-11-30T12:00:05Z", "0s"),  # a clock slightly ahead
    ],
)
def test_age(timestamp, shown):
    assert age(timestamp, NOW) == shown


def obj(kind: str, status: dict | None = None, spec: dict | None = None) -> dict:
    return {"kind": kind, "status": status or {}, "spec": spec or {}}


@pytest.mark.parametrize(
    ("item", "state"),
    [
        (obj("RayJob", {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}), "Running"),
        (obj("RayJob", {"jobStatus": "SUCCEEDED"}), "SUCCEEDED"),
        (obj("RayJob", spec={"suspend": True}), "Suspended"),  # queued by Kueue
        (obj("RayJob"), "Pending"),
        (obj("RayCluster", {"state": "ready"}), "ready"),
        (obj("RayCluster", spec={"suspend": True}), "Suspended"),
        (obj("Job", {"conditions": [{"type": "Failed", "status": "True"}]}), "Failed"),
        (obj("Job", {"conditions": [{"type": "Complete", "status": "True"}]}), "Complete"),
        (
            obj("Job", {"conditions": [{"type": "Failed", "status": "False"}], "active": 2}),
            "Running",
        ),
        (obj("Job", spec={"suspend": True}), "Suspended"),
        (obj("Job"), "Pending"),
        (obj("Deployment", {"readyReplicas": 1}, {"replicas": 2}), "1/2 ready"),
        (obj("ConfigMap"), "-"),
    ],
)
def test_state_of(item, state):
    assert state_of(item) == state


def pod(name: str, role: str, index: str | None = None) -> dict:
    tags = {labels.ROLE: role}
    if index is not None:
        tags[COMPLETION_INDEX] = index
    return {"metadata": {"name": name, "labels": tags}}


def test_ranks_follow_the_completion_index_then_names():
    pods = [
        pod("j-10", "job", "10"),
        pod("j-2", "job", "2"),
        pod("head", "head"),
        pod("w-b", "worker"),
        pod("w-a", "worker"),
    ]
    assert [p["metadata"]["name"] for p in ranked(pods)] == ["j-2", "j-10", "w-a", "w-b"]
