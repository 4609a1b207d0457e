"""Synchronizer and learners over real sockets (synchronizer in a thread, learners in
threads): the merged weights are the hand-computed outer step, decoupled merges keep the
steps in flight, late learners catch up, a restarted synchronizer resumes its state."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from driver.diloco import state
from driver.diloco.learner import LearnerConfig
from tests.diloco.conftest import in_threads, learner, linear

LR, MU = 0.7, 0.9


def flat(model: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def set_flat(model: torch.nn.Module, values: np.ndarray) -> None:
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(values[offset : offset + p.numel()]).view_as(p))
            offset += p.numel()


def one_round(learners, models, moves, step):
    """Each learner moves its weights by its `moves[i]` (a fake inner phase) and syncs."""
    for model, move in zip(models, moves, strict=True):
        set_flat(model, flat(model) + move)
    in_threads(
        *[lambda ln=ln, m=m: ln.after_step(step, m) for ln, m in zip(learners, models, strict=True)]
    )


@pytest.mark.parametrize("count", [2, 3])
def test_merged_weights_equal_the_hand_computed_outer_step(sync_thread, keys_dir, count):
    sync = sync_thread(lr=LR, momentum=MU, compression="fp32", round_timeout_s=30)
    names = ["a", "b", "c"][:count]
    models = [linear(0) for _ in names]
    learners = [learner(sync.address, keys_dir, n) for n in names]
    in_threads(*[lambda ln=ln, m=m: ln.start(m) for ln, m in zip(learners, models, strict=True)])
    w, buf = flat(models[0]), np.zeros_like(flat(models[0]))
    rng = np.random.default_rng(0)
    for step in range(2):  # two rounds: the second uses the outer momentum
        moves = [rng.normal(0, 0.01, w.shape).astype(np.float32) for _ in names]
        one_round(learners, models, moves, step)
        g = np.mean([-m for m in moves], axis=0)  # base - local
        buf = MU * buf + g
        w = w - LR * (g + MU * buf)
        for model in models:
            np.testing.assert_allclose(flat(model), w, rtol=1e-5, atol=1e-6)
    records = state.read_rounds(sync.sync.state_dir)
    assert [r["contributors"] for r in records] == [names, names]
    for ln in learners:
        ln.close()


def test_bf16_and_int8_rounds_stay_close_to_the_exact_step(sync_thread, keys_dir):
    for compression, tol in (("bf16", 2e-4), ("int8", 5e-4)):
        sync = sync_thread(compression, lr=LR, momentum=MU, compression=compression)
        model = linear(0)
        ln = learner(sync.address, keys_dir, "a", compression=compression)
        ln.start(model)
        w = flat(model)
        move = np.random.default_rng(1).normal(0, 0.01, w.shape).astype(np.float32)
        one_round([ln], [model], [move], 0)
        np.testing.assert_allclose(flat(model), w + LR * (1 + MU) * move, atol=tol)
        ln.close()


def test_decoupled_delta_merge_keeps_the_steps_in_flight(sync_thread, keys_dir):
    sync = sync_thread(lr=1.0, momentum=0.0, compression="fp32")
    model = linear(0)
    ln = learner(sync.address, keys_dir, "a", mode="decoupled", sync_every=2)
    ln.start(model)
    base = flat(model)
    set_flat(model, base + 0.1)
    ln.after_step(0, model)
    ln.after_step(1, model)  # sync point: pushes base + 0.1, does not wait
    assert ln.pending is not None
    set_flat(model, flat(model) + 0.01)  # a step taken while the round is in flight
    ln.finish(model)
    # lr 1, no momentum: the shared weights become the learner's snapshot (base + 0.1)
    np.testing.assert_allclose(flat(model), base + 0.11, atol=1e-6)
    np.testing.assert_allclose(
        torch.cat([v.reshape(-1) for v in ln.base.values()]), base + 0.1, atol=1e-6
    )
    ln.close()


def test_decoupled_replace_drops_the_steps_in_flight(sync_thread, keys_dir):
    sync = sync_thread(lr=1.0, momentum=0.0, compression="fp32")
    model = linear(0)
    ln = learner(sync.address, keys_dir, "a", mode="decoupled", merge="replace")
    ln.start(model)
    base = flat(model)
    set_flat(model, base + 0.1)
    ln.after_step(0, model)
    set_flat(model, flat(model) + 0.01)
    ln.finish(model)
    np.testing.assert_allclose(flat(model), base + 0.1, atol=1e-6)
    ln.close()


def test_absent_learner_is_dropped_after_the_timeout_and_catches_up(sync_thread, keys_dir):
    sync = sync_thread(lr=1.0, momentum=0.0, compression="fp32", round_timeout_s=1.0)
    models = [linear(0) for _ in range(3)]
    a, b, c = (learner(sync.address, keys_dir, n) for n in "abc")
    in_threads(*[lambda ln=ln, m=m: ln.start(m) for ln, m in zip((a, b, c), models, strict=True)])
    one_round([a, b], models[:2], [0.1, 0.3], 0)  # c is silent: merged after 1 s without it
    one_round([a, b], models[:2], [0.1, 0.1], 1)  # not waited for any more
    c_before = flat(models[2])
    c.after_step(0, models[2])  # c returns against round 0: gets the shared weights
    np.testing.assert_allclose(flat(models[2]), flat(models[0]), atol=1e-6)
    assert c.round == 2 and c.merges[-1]["kind"] == "full"
    assert not np.allclose(c_before, flat(models[2]))
    one_round([a, b, c], models, [0.0, 0.0, 0.0], 2)  # c counts again
    records = state.read_rounds(sync.sync.state_dir)
    assert [r["contributors"] for r in records] == [["a", "b"], ["a", "b"], ["a", "b", "c"]]
    assert records[0]["missing"] == ["c"] and records[2]["late"] == ["c"]
    for ln in (a, b, c):
        ln.close()


def test_restarted_synchronizer_resumes_round_weights_and_momentum(sync_thread, keys_dir):
    sync = sync_thread(lr=LR, momentum=MU, compression="fp32")
    model = linear(0)
    ln = learner(sync.address, keys_dir, "a")
    ln.start(model)
    w = flat(model)
    one_round([ln], [model], [np.full(w.shape, 0.01, np.float32)], 0)
    sync.close()
    ln.close()
    again = sync_thread(lr=LR, momentum=MU, compression="fp32")
    assert again.sync.round == 1
    ln = learner(again.address, keys_dir, "a")
    ln.start(model)
    assert ln.merges[-1]["kind"] == "same"  # it holds the shared weights: nothing sent
    one_round([ln], [model], [np.full(w.shape, 0.02, np.float32)], 1)
    g1, g2 = -0.01, -0.02
    expected = w - LR * (g1 + MU * g1) - LR * (g2 + MU * (MU * g1 + g2))
    np.testing.assert_allclose(flat(model), expected, rtol=1e-5, atol=1e-6)
    ln.close()


def test_learner_waits_out_an_absent_synchronizer_and_trains_on(keys_dir):
    model = linear(0)
    ln = learner("tcp://127.0.0.1:9", keys_dir, "a", barrier_timeout_s=0.3, join_timeout_s=0.3)
    ln.start(model)
    w = flat(model)
    ln.after_step(0, model)
    assert ln.round == -1 and np.array_equal(flat(model), w) and ln.pending
    ln.close()


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({}, None),
        ({"sync_every": 0}, "diloco.sync_every"),
        ({"mode": "async"}, "diloco.mode"),
        ({"merge": "mean"}, "diloco.merge"),
        ({"compression": "fp8"}, "diloco.compression"),
        ({"address": "http://x"}, "diloco.address"),
        ({"learner": "A b"}, "diloco.learner"),
        ({"fragments": 26}, "diloco.fragments"),  # more than H = 25
        ({"index": 2, "learners": 2}, "diloco.index"),
        ({"keys_env_prefix": "lower"}, "diloco.keys_env_prefix"),
        ({"barrier_timeout_s": 0.0}, "diloco.barrier_timeout_s"),
    ],
)
def test_learner_config_values(values, field):
    from catalog.errors import InputError

    base = {"address": "tcp://sync:5555", "learner": "a", "keys": "/keys", "sync_every": 25}
    if field is None:
        cfg = LearnerConfig(**{**base, **values})
        assert (cfg.sync_every, cfg.mode, cfg.merge, cfg.compression) == (
            25,
            "barrier",
            "delta",
            "bf16",
        )
        return
    with pytest.raises(InputError) as err:
        LearnerConfig(**{**base, **values})
    assert err.value.field == field and "\n" not in err.value.line()


def test_no_address_means_no_diloco():
    from driver.diloco import hook

    assert not LearnerConfig().address and not hook.prepare(None, LearnerConfig())


def test_a_push_of_the_wrong_shape_is_refused_and_the_round_unharmed(sync_thread, keys_dir):
    from driver.diloco import keys
    from driver.diloco.link import Client
    from driver.messaging import wire

    sync = sync_thread(lr=1.0, momentum=0.0, compression="fp32")
    model = linear(0)
    ln = learner(sync.address, keys_dir, "a")
    ln.start(model)
    bad = Client(sync.address, keys.client_keys(keys_dir, "b"))
    try:
        grad = {"t": {"weight": torch.zeros(2, 2), "bias": torch.zeros(3)}}
        rid = bad.request("push", {"learner": "b", "round": 0, "grad": grad})
        reply = bad.recv(10)
        assert reply.id == rid and reply.kind == "err" and "weight" in reply.error
        garbage = bad.request("push", {"learner": "b", "round": 0, "grad": "nope"})
        assert bad.recv(10).id == garbage
        w = flat(model)
        one_round([ln], [model], [np.full(w.shape, 0.5, np.float32)], 0)
        np.testing.assert_allclose(flat(model), w + 0.5, atol=1e-6)  # lr 1: a's weights alone
        assert state.read_rounds(sync.sync.state_dir)[0]["contributors"] == ["a"]
        assert wire.decode  # the reply above went through the wire format
    finally:
        bad.close()
        ln.close()


def test_barrier_learner_merges_an_update_that_came_after_its_timeout(sync_thread, keys_dir):
    sync = sync_thread(lr=1.0, momentum=0.0, compression="fp32", round_timeout_s=1.0)
    models = [linear(0), linear(0)]
    a = learner(sync.address, keys_dir, "a", barrier_timeout_s=0.2, sync_every=100)
    b = learner(sync.address, keys_dir, "b")
    in_threads(lambda: a.start(models[0]), lambda: b.start(models[1]))
    w = flat(models[0])
    set_flat(models[0], w + 0.2)
    for step in range(100):  # the 100th step is a sync point; b stays silent
        a.after_step(step, models[0])
    assert a.pending and a.round == 0  # gave up waiting; the round merges after 1 s
    deadline = time.time() + 20
    while a.pending and time.time() < deadline:
        a.after_step(100, models[0])  # not a sync point: polls and merges on arrival
        time.sleep(0.25)
    assert a.round == 1 and a.merges[-1]["kind"] == "delta"
    np.testing.assert_allclose(flat(models[0]), w + 0.2, atol=1e-6)  # lr 1: a's weights
    for ln in (a, b):
        ln.close()


def test_streaming_fragments_sync_on_staggered_schedules(sync_thread, keys_dir):
    from driver.diloco.learner import make

    sync = sync_thread(lr=1.0, momentum=0.0, compression="fp32")  # lr 1, no momentum: mean
    models = [linear(0), linear(0)]
    cfg = {"sync_every": 2, "fragments": 2}
    ls = [make(LearnerConfig(sync.address, n, keys_dir, compression="fp32", **cfg), m)
          for n, m in zip("ab", models, strict=True)]  # fmt: skip
    in_threads(*[lambda ln=ln, m=m: ln.start(m) for ln, m in zip(ls, models, strict=True)])
    first, second = ls[0].parts[0].names, ls[0].parts[1].names
    assert first and second and not first & second  # weight, bias: one fragment each
    w = {k: v.detach().clone() for k, v in models[0].named_parameters()}
    for model, move in zip(models, (0.1, 0.3), strict=True):
        set_flat(model, flat(model) + move)

    def params(model, names):
        return {k: v.detach() for k, v in model.named_parameters() if k in names}

    in_threads(*[lambda ln=ln, m=m: ln.after_step(0, m) for ln, m in zip(ls, models, strict=True)])
    for model in models:  # step 1: only fragment 1 synced (its offset is H/2)
        for k, v in params(model, second).items():
            assert torch.allclose(v, w[k] + 0.2, atol=1e-6)
    assert not torch.allclose(*(next(iter(params(m, first).values())) for m in models))
    in_threads(*[lambda ln=ln, m=m: ln.after_step(1, m) for ln, m in zip(ls, models, strict=True)])
    for model in models:  # step 2: fragment 0's turn
        for k, v in params(model, first).items():
            assert torch.allclose(v, w[k] + 0.2, atol=1e-6)
    root = sync.sync.state_dir
    assert [r["fragment"] for r in state.read_rounds(f"{root}/fragment-1")] == [1]
    assert [r["fragment"] for r in state.read_rounds(root)] == [0]
    assert ls[0].round == 1 and sorted(m["fragment"] for m in ls[0].merges[-2:]) == [0, 1]
    for ln in ls:
        ln.close()
