"""A learner's sync state in its checkpoint: a learner restarted from its checkpoint continues
the same rounds and ends with the weights of one that never stopped (int8 compression, so
the error-feedback residual has to come back too)."""

from __future__ import annotations

import pytest
import torch

from driver.checkpoint import CheckpointConfig, Checkpointer, TrainState
from driver.diloco import state
from driver.diloco.resume import LearnerState
from tests.diloco.conftest import learner

H, STEPS, SAVED_AT = 3, 10, 6  # saved after step 6: 2 rounds merged, a step of progress since


@pytest.fixture(autouse=True)
def _own_checkpoint_key(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.delenv("REVE_CHECKPOINT_KEY", raising=False)


def model_and_optimizer(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    return model, torch.optim.AdamW(model.parameters(), lr=0.05)


def step(model, optimizer, i: int) -> None:
    g = torch.Generator().manual_seed(100 + i)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 3, generator=g)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


def train(sync, keys_dir, model, optimizer, steps: range, ckpt=None, restore=None):
    """One learner `a` for `steps`; `restore`: a Checkpointer to resume from first."""
    me = learner(sync.address, keys_dir, "a", sync_every=H, compression="int8")
    train_state = TrainState(model, optimizer, extra={"diloco": LearnerState(me, model)})
    if restore:
        restore.load(train_state)
    me.start(model)
    for i in steps:
        step(model, optimizer, i)
        me.after_step(i, model)
        if ckpt and i == SAVED_AT:
            ckpt.save(i, train_state)
            assert ckpt.wait()
    me.finish(model)
    me.close()
    return me


def test_a_learner_restarted_from_its_checkpoint_continues_the_same_rounds(
    sync_thread, keys_dir, tmp_path
):
    ref_sync = sync_thread("ref", expect=("a",), compression="int8")
    ref_model, ref_opt = model_and_optimizer(0)
    reference = train(ref_sync, keys_dir, ref_model, ref_opt, range(STEPS))

    sync = sync_thread("run", expect=("a",), compression="int8")
    ckpt = Checkpointer(CheckpointConfig(root=str(tmp_path / "ckpt"), interval_steps=0), "t", "r")
    model, opt = model_and_optimizer(0)
    train(sync, keys_dir, model, opt, range(SAVED_AT + 2), ckpt=ckpt)  # step 7 is lost
    ckpt.close()

    model, opt = model_and_optimizer(1)  # a new process: other weights until restored
    ckpt = Checkpointer(CheckpointConfig(root=str(tmp_path / "ckpt")), "t", "r")
    resumed = train(sync, keys_dir, model, opt, range(SAVED_AT + 1, STEPS), restore=ckpt)
    ckpt.close()

    assert resumed.merges[0] == {"round": 2, "kind": "same", "step": -1, "fragment": 0}
    assert [m["kind"] for m in resumed.merges[1:]] == ["delta"]  # the round of step 8
    assert resumed.round == reference.round == 3
    for name, tensor in ref_model.named_parameters():
        assert torch.equal(dict(model.named_parameters())[name], tensor), name
    rounds = state.read_rounds(tmp_path / "run")
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert all(r["contributors"] == ["a"] and not r["late"] for r in rounds)


def test_a_checkpoint_of_another_learner_is_refused(sync_thread, keys_dir):
    sync = sync_thread("run", expect=("a",))
    model, _ = model_and_optimizer(0)
    a = learner(sync.address, keys_dir, "a")
    a.start(model)
    saved = LearnerState(a, model).state_dict()
    b = learner(sync.address, keys_dir, "b")
    with pytest.raises(ValueError, match="learner 'a' fragment 0, not 'b'"):
        LearnerState(b, model).load_state_dict(saved)
    a.close()
    b.close()


def test_a_streaming_learner_saves_and_restores_every_fragment(sync_thread, keys_dir):
    from driver.diloco.learner import LearnerConfig, make

    sync = sync_thread("run", expect=("a",))
    model, opt = model_and_optimizer(0)
    timeouts = {"barrier_timeout_s": 20.0, "join_timeout_s": 20.0}
    cfg = LearnerConfig(sync.address, "a", keys_dir, 4, fragments=2, compression="int8", **timeouts)
    first = make(cfg, model)
    first.start(model)
    for i in range(5):  # fragment 1 syncs after step 1, fragment 0 after step 3
        step(model, opt, i)
        first.after_step(i, model)
    saved = LearnerState(first, model).state_dict()
    first.close()
    assert sorted(saved) == ["fragment0", "fragment1"]
    second = make(cfg, model)
    LearnerState(second, model).load_state_dict(saved)
    for a, b in zip(first.parts, second.parts, strict=True):
        assert (b.round, b.local_steps, b.resumed) == (a.round, a.local_steps, True)
        assert a.round == 1 and set(b.base) == set(a.base) == set(a.residual)
        assert all(torch.equal(a.base[k], b.base[k]) for k in a.base)
        assert all(torch.equal(a.residual[k], b.residual[k]) for k in a.residual)
    second.close()


def test_the_hook_gives_the_loop_the_learners_checkpoint_entry(sync_thread, keys_dir):
    from driver.config.diloco import LearnerConfig
    from driver.diloco import hook

    assert hook.Hook().checkpoint_state() == {}
    sync = sync_thread("run", expect=("a",))
    cfg = LearnerConfig(sync.address, "a", keys_dir, join_timeout_s=20.0)
    model, _ = model_and_optimizer(0)
    diloco = hook.prepare(model, cfg)
    entry = diloco.checkpoint_state()["diloco"]
    assert isinstance(entry, LearnerState) and diloco.learner.round == -1  # not joined yet
    diloco.start(model)
    assert diloco.learner.round == 0
    diloco.end(model)
