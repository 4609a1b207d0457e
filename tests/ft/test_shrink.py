"""The shrink request the lowest live group sends (driver.ft.shrink), with a fake starter
that records the ShrinkInput fields Warden's ShrinkWorkflow takes."""

from __future__ import annotations

import dataclasses

import pytest

from driver.ft.shrink import ShrinkRequest, ShrinkTarget, local_shrink, warden_shrink
from warden.model import ShrinkInput


@pytest.mark.parametrize(
    ("before", "after", "per_group", "per_pod", "expected"),
    [(4, 3, 1, 1, (4, 3)), (4, 3, 8, 8, (4, 3)), (4, 2, 2, 8, (1, 1)), (6, 5, 4, 8, (3, 3))],
)
def test_replicas(before, after, per_group, per_pod, expected):
    assert ShrinkRequest(before, after).replicas(per_group, per_pod) == expected


def test_warden_shrink_sends_shrink_input_fields():
    sent = []
    target = ShrinkTarget("research", "tiny-lm", "h100", workers_per_group=1, workers_per_pod=1)
    warden_shrink(target, lambda **kw: sent.append(kw))(ShrinkRequest(4, 3))
    assert sent == [
        dict(namespace="research", name="tiny-lm", group="h100", replicas_from=4, replicas_to=3)
    ]
    assert set(sent[0]) == {f.name for f in dataclasses.fields(ShrinkInput)}
    ShrinkInput(**sent[0])


def test_no_shrink_when_pods_stay_and_local_is_a_no_op(caplog):
    sent = []
    target = ShrinkTarget("ns", "run", "cpu", workers_per_group=1, workers_per_pod=8)
    warden_shrink(target, lambda **kw: sent.append(kw))(ShrinkRequest(8, 7))
    assert sent == []
    local_shrink(ShrinkRequest(3, 2))
