"""The pure maths of DiLoCo: outer step, compression, merge rules, when a round closes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from driver.diloco import outer


def params(*values: float) -> outer.Params:
    return {"w": torch.tensor(values, dtype=torch.float32)}


def test_pseudo_gradient_and_mean():
    base = params(1.0, 2.0)
    grads = [
        outer.pseudo_gradient(base, params(0.5, 2.5)),
        outer.pseudo_gradient(base, params(1.5, 1.5)),
    ]
    assert outer.mean(grads)["w"].tolist() == [0.0, 0.0]
    assert grads[0]["w"].tolist() == [0.5, -0.5]
    with pytest.raises(ValueError):
        outer.mean([])


@pytest.mark.parametrize("nesterov", [True, False])
def test_outer_step_matches_hand_computation_over_two_rounds(nesterov):
    lr, mu = 0.7, 0.9
    w, buf = np.array([1.0, -2.0, 3.0]), np.zeros(3)
    shared, momentum = params(*w), outer.zeros_like(params(*w))
    for g in (np.array([0.1, -0.2, 0.3]), np.array([0.05, 0.0, -0.1])):
        buf = mu * buf + g
        w = w - lr * ((g + mu * buf) if nesterov else buf)
        shared, momentum = outer.outer_step(shared, momentum, params(*g), lr, mu, nesterov)
    np.testing.assert_allclose(shared["w"].numpy(), w, rtol=1e-6)
    np.testing.assert_allclose(momentum["w"].numpy(), buf, rtol=1e-6)


def test_outer_step_lr_one_no_momentum_is_plain_averaging():
    base, locals_ = params(1.0, 1.0), [params(0.0, 2.0), params(2.0, 4.0)]
    grad = outer.mean([outer.pseudo_gradient(base, x) for x in locals_])
    shared, _ = outer.outer_step(base, outer.zeros_like(base), grad, 1.0, 0.0)
    assert shared["w"].tolist() == [1.0, 3.0]  # the mean of the learners' weights


@pytest.mark.parametrize(
    ("compression", "tolerance", "dtype"),
    [("fp32", 0.0, torch.float32), ("bf16", 1e-2, torch.bfloat16),
     ("fp16", 1e-3, torch.float16), ("int8", 1e-2, torch.int8)],
)  # fmt: skip
def test_pack_unpack(compression, tolerance, dtype):
    x = {"w": torch.randn(50, generator=torch.Generator().manual_seed(0))}
    packed = outer.pack(x, compression)
    assert packed["t"]["w"].dtype == dtype
    back = outer.unpack(packed, x, "test")
    assert torch.allclose(back["w"], x["w"], atol=tolerance * x["w"].abs().max().item() + 1e-12)


def test_unpack_refuses_wrong_names_shapes_dtypes_and_missing_scales():
    ref = {"w": torch.zeros(3)}
    bad = [
        {"t": {"v": torch.zeros(3)}},
        {"t": {"w": torch.zeros(4)}},
        {"t": {"w": torch.zeros(3, dtype=torch.int64)}},
        {"t": {"w": torch.zeros(3, dtype=torch.int8)}},
        {"x": 1},
        [1, 2],
    ]
    for packed in bad:
        with pytest.raises(ValueError):
            outer.unpack(packed, ref, "test")


def test_view_carries_rounding_error_into_the_next_delta():
    view, shared = params(0.0), params(1.0 + 1e-3)
    delta, view = outer.advance_view(view, shared, "bf16")
    assert delta["t"]["w"].dtype == torch.bfloat16
    residual = (shared["w"] - view["w"]).abs().item()
    assert residual > 0  # bf16 lost something, the view knows how much
    delta, view = outer.advance_view(view, shared, "bf16")
    assert (shared["w"] - view["w"]).abs().item() < residual


def test_error_feedback_sends_what_compression_lost_next_time():
    grad = params(1.0 + 1e-3)
    packed, residual = outer.with_feedback(grad, {}, "bf16")
    sent = outer.unpack(packed, grad, "g")["w"]
    assert (sent + residual["w"]).item() == pytest.approx(grad["w"].item(), abs=1e-7)
    packed2, _ = outer.with_feedback(params(0.0), residual, "fp32")
    assert outer.unpack(packed2, grad, "g")["w"].item() == pytest.approx(residual["w"].item())


@pytest.mark.parametrize(
    ("rule", "expected"),
    [("replace", [10.0, 20.0]), ("delta", [10.5, 19.0])],
)
def test_merge_rules(rule, expected):
    snapshot, now, new_base = params(1.0, 2.0), params(1.5, 1.0), params(10.0, 20.0)
    assert outer.merge(rule, now, snapshot, new_base)["w"].tolist() == expected


def test_merge_rules_agree_when_nothing_happened_in_flight():
    snapshot, new_base = params(1.0, 2.0), params(3.0, 4.0)
    for rule in outer.MERGE_RULES:
        assert outer.merge(rule, snapshot, snapshot, new_base)["w"].tolist() == [3.0, 4.0]
    with pytest.raises(ValueError):
        outer.merge("average", snapshot, snapshot, new_base)


@pytest.mark.parametrize(
    ("expected", "received", "waited", "minimum", "closes"),
    [
        ({"a", "b"}, {"a", "b"}, 0.0, 1, True),   # everyone is in
        ({"a", "b"}, {"a"}, 1.0, 1, False),       # waiting for b
        ({"a", "b"}, {"a"}, 5.0, 1, True),        # timed out: go with those present
        ({"a", "b"}, {"a"}, 5.0, 2, False),       # but never below the minimum
        ({"a"}, {"a", "c"}, 0.0, 1, True),        # a newcomer does not hold a round back
        (set(), set(), 9.0, 1, False),            # nothing to merge
    ],
)  # fmt: skip
def test_round_closes(expected, received, waited, minimum, closes):
    assert outer.round_closes(expected, received, waited, 5.0, minimum) is closes


def test_digest_depends_on_names_and_values():
    a = outer.digest(params(1.0, 2.0))
    assert a == outer.digest(params(1.0, 2.0))
    assert a != outer.digest(params(1.0, 2.5))
    assert a != outer.digest({"v": torch.tensor([1.0, 2.0])})


@pytest.mark.parametrize(
    ("sizes", "parts", "groups"),
    [
        ([("a", 1)], 1, [["a"]]),
        ([("a", 10), ("b", 10), ("c", 10), ("d", 10)], 2, [["a", "b"], ["c", "d"]]),
        ([("a", 100), ("b", 1), ("c", 1)], 2, [["a"], ["b", "c"]]),
        ([("a", 1), ("b", 1), ("c", 100)], 3, [["a"], ["b"], ["c"]]),
        ([("a", 1), ("b", 1), ("c", 1), ("d", 97)], 2, [["a", "b", "c"], ["d"]]),
    ],
)
def test_partition_into_contiguous_fragments(sizes, parts, groups):
    assert outer.partition(sizes, parts) == groups


def test_partition_refuses_more_fragments_than_tensors():
    with pytest.raises(ValueError):
        outer.partition([("a", 1)], 2)


def test_peak_push_sums_the_fragments_due_at_one_step():
    from tests.support.diloco_trainer import peak_push

    pushes = [{"step": 9, "bytes": 10}, {"step": 4, "bytes": 7}, {"step": 9, "bytes": 5}]
    assert peak_push(pushes) == 15 and peak_push([]) == 0
