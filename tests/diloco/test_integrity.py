"""DiLoCo integrity: nothing non-finite is merged, saved, sent or applied; a learner speaks
only with its own key's name; whatever a learner on the allow-list sends, the synchronizer
answers it and serves on."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch

from driver.diloco import keys, state
from driver.diloco.link import Client
from driver.messaging import wire
from tests.diloco.conftest import learner, linear
from tests.diloco.test_sync import flat, one_round, set_flat

SHAPES = {"weight": (3, 4), "bias": (3,)}  # linear(): torch.nn.Linear(4, 3)


def fill(value, dtype=torch.float32):
    return {k: torch.full(s, value).to(dtype) for k, s in SHAPES.items()}


def ask(client: Client, method: str, payload) -> wire.Message:
    rid = client.request(method, payload)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        msg = client.recv(0.5)
        if msg is not None and msg.id == rid:
            return msg
    raise AssertionError(f"no reply to {method}")


@pytest.fixture
def started(sync_thread, keys_dir):
    """A synchronizer with shared weights (learner a joined) and a raw client for b."""
    sync = sync_thread(lr=1.0, momentum=0.0, compression="fp32", round_timeout_s=0.5)
    model = linear(0)
    a = learner(sync.address, keys_dir, "a")
    a.start(model)
    b = Client(sync.address, keys.client_keys(keys_dir, "b"))
    yield sync, a, model, b
    b.close()
    a.close()


@pytest.mark.parametrize(
    ("grad", "reason"),
    [
        ({"t": fill(math.nan)}, "non_finite"),
        ({"t": fill(-math.inf)}, "non_finite"),
        ({"t": fill(1e6)}, "out_of_range"),
        ({"t": fill(1, torch.int8), "s": {"weight": math.nan, "bias": 0.1}}, "protocol"),
        ({"t": fill(1, torch.int8), "s": [0.1, 0.1]}, "protocol"),  # ended the process before
    ],
)
def test_a_bad_push_is_refused_counted_against_its_learner_and_never_merged(started, grad, reason):
    sync, a, model, b = started
    reply = ask(b, "push", {"learner": "b", "round": 0, "grad": grad})
    assert reply.kind == "err" and reply.code in ("refused", "protocol")
    w = flat(model)
    one_round([a], [model], [np.full(w.shape, 0.25, np.float32)], 0)
    np.testing.assert_allclose(flat(model), w + 0.25, atol=1e-6)  # a's move alone
    assert sync.sync.stats()["refused"] == {reason: 1}
    assert sync.sync.stats()["refused_peers"] == {"b": 1}
    record = state.read_rounds(sync.sync.state_dir)[0]
    assert record["contributors"] == ["a"]
    if reason != "protocol":
        assert record["refused"] == {"b": reason}
    saved = state.load(sync.sync.state_dir)
    assert all(torch.isfinite(t).all() for t in saved.shared.values())


def test_a_learner_cannot_speak_as_another(started):
    sync, a, model, b = started
    reply = ask(b, "push", {"learner": "a", "round": 0, "grad": {"t": fill(0.1)}})
    assert (reply.code, "with the key of 'b'" in reply.error) == ("refused", True)
    assert sync.sync.stats()["refused"] == {"key": 1}


def test_deeply_nested_json_from_a_learner_is_refused_and_the_synchronizer_serves_on(started):
    sync, a, model, b = started
    body = b'{"p":' + b"[" * 5000 + b"]" * 5000 + b',"a":[]}'
    rid = b.request("push", {"learner": "b"})  # a well-formed one, then the deep one
    b.sock.send_multipart(wire.pack(wire.Message("req", rid + 100, method="push", body=[body])))
    assert ask(b, "join", {"learner": "b", "digest": ""}).kind == "rep"
    assert sync.thread.is_alive() and sync.sync.stats()["refused"]["garbage"] == 1


def test_a_merge_that_comes_out_non_finite_is_dropped_not_saved_or_sent(sync_thread, keys_dir):
    sync = sync_thread(lr=100.0, momentum=0.0, compression="fp16", round_timeout_s=0.2)
    model = linear(0)
    a = learner(sync.address, keys_dir, "a", compression="fp32")
    a.start(model)
    b = Client(sync.address, keys.client_keys(keys_dir, "b"))
    try:  # 1e3 is within range, but 100 x 1e3 overflows the fp16 delta
        reply = ask(b, "push", {"learner": "b", "round": 0, "grad": {"t": fill(1e3)}})
        assert (reply.kind, reply.code) == ("err", "refused") and "merge dropped" in reply.error
        assert sync.sync.round == 0 and state.read_rounds(sync.sync.state_dir) == []
        saved = state.load(sync.sync.state_dir)
        assert all(torch.isfinite(t).all() for t in saved.shared.values())
    finally:
        b.close()
        a.close()


def test_a_learner_that_diverged_pushes_nothing_and_takes_the_shared_weights(started):
    sync, a, model, b = started
    shared = flat(model)
    set_flat(model, np.full(shared.shape, np.nan, np.float32))  # its training diverged
    a.after_step(0, model)
    assert a.refused_pushes == 1 and a.merges[-1]["kind"] == "full"
    np.testing.assert_allclose(flat(model), shared)  # the shared weights replace its own
    assert state.read_rounds(sync.sync.state_dir) == []  # nothing was pushed or merged


def test_a_learner_never_applies_a_non_finite_update(started, monkeypatch):
    sync, a, model, b = started
    before = flat(model)
    bad = wire.encode({"kind": "delta", "round": 1, "weights": {"t": fill(math.inf)}})
    a.pending = (77, time.time())
    monkeypatch.setattr(a.client, "recv", lambda timeout: wire.Message("rep", 77, body=bad))
    a._poll(model, 0, 0.0)
    assert a.refused_updates == 1 and a.round == 0 and not a.pending
    np.testing.assert_array_equal(flat(model), before)
