"""The rule by which a torchft learner's groups keep or drop an answer of the synchronizer
(driver.diloco.replicas.fresh): every group applies an answer once, in round order. The
exchange itself runs on real processes: tests/diloco/test_ft.py."""

from __future__ import annotations

import pytest

from driver.diloco.replicas import fresh


@pytest.mark.parametrize(
    ("kind", "answer", "current", "joining", "applies"),
    [
        ("delta", 3, 2, False, True),  # the merge of the round in flight
        ("delta", 3, 3, False, False),  # already applied (another group held it too)
        ("delta", 4, 2, False, False),  # computed against weights we do not hold
        ("full", 5, 2, False, True),  # a late push: the newest shared weights
        ("full", 2, 2, False, False),  # the shared weights we hold already
        ("full", 2, 2, True, True),  # a join answered with this round's weights
        ("full", 0, -1, True, True),  # the answer to our offered weights
        ("same", 2, 2, True, True),  # a restored learner joining its own round
        ("same", 2, 2, False, False),  # a second answer to a join already settled
        ("same", 1, 2, True, False),  # older than what we hold
    ],
)
def test_an_answer_applies_once_and_in_order(kind, answer, current, joining, applies):
    assert fresh(kind, answer, current, joining) is applies
