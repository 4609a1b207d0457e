"""Resume equivalence and the save/commit/retention/callback path, in one process (CPU)."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from driver.checkpoint import CheckpointError, PreemptionGuard, failure_config
from driver.checkpoint.layout import MARKER
from tests.checkpoint.toy import config, full_params, make_state, train


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


MODES = {
    "async": {"async_mode": "async"},
    "sync": {"async_mode": "sync"},
    "overlap": {"async_mode": "async", "overlap_staging": True},
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_stop_at_k_and_resume_is_bitwise_identical(root, checkpointers, mode):
    # Dropout makes the result depend on the restored RNG state too.
    reference = make_state(dropout=0.3)
    train(reference, None, 1, 9)

    first = make_state(dropout=0.3)
    ckpt = checkpointers(config(root, **MODES[mode]), "team", "run")
    train(first, ckpt, 1, 4)  # saves after step 3; step 4 is lost with the "crash"
    ckpt.close()

    resumed = make_state(dropout=0.3)
    torch.manual_seed(999)  # a fresh process would not have the old RNG state
    ckpt = checkpointers(config(root, **MODES[mode]), "team", "run")
    ref = ckpt.resume(resumed)
    assert (ref.step, resumed.step, resumed.dataloader.position) == (3, 3, 3)
    train(resumed, ckpt, resumed.step + 1, 9)
    assert same(full_params(resumed.model), full_params(reference.model))
    assert resumed.lr_scheduler.last_epoch == reference.lr_scheduler.last_epoch
    a, b = resumed.optimizer.state_dict()["state"], reference.optimizer.state_dict()["state"]
    assert all(torch.equal(a[i]["exp_avg_sq"], b[i]["exp_avg_sq"]) for i in b)


def test_fsspec_storage_path(checkpointers):
    """gs:// goes through fsspec (FsspecWriter/Reader); memory:// takes the same path."""
    root = "memory://ckpt-bucket"
    state = make_state()
    ckpt = checkpointers(config(root), "team", "mem")
    train(state, ckpt, 1, 3)
    assert ckpt.wait() and ckpt.latest().uri == "memory://ckpt-bucket/team/mem/step-3"
    other = make_state()
    assert checkpointers(config(root), "team", "mem").load(other).step == 3
    assert same(full_params(other.model), full_params(state.model))


def test_retention_callbacks_and_counters(root, checkpointers):
    seen = []

    class Recorder:
        def on_checkpoint(self, step, uri):
            seen.append((step, os.path.exists(os.path.join(uri, MARKER))))

    class Broken:
        def on_checkpoint(self, step, uri):
            raise RuntimeError("aux service down")

    cfg = config(root, interval_steps=2, keep_last=2, keep_every=4)
    ckpt = checkpointers(cfg, "team", "run", callbacks=(Recorder(), Broken()))
    train(make_state(), ckpt, 1, 12)
    ckpt.wait()
    assert sorted(ckpt.storage.step_dirs()) == [4, 8, 10, 12]
    assert seen == [(s, True) for s in (2, 4, 6, 8, 10, 12)]
    m = ckpt.metrics()
    assert (m["saves_committed"], m["saves_failed"], m["callback_failures"]) == (6, 0, 6)
    assert m["last_committed_step"] == 12 and m["last_blocked_s"] >= 0


def test_partial_checkpoint_is_ignored_and_cleaned_at_start(root, checkpointers):
    ckpt = checkpointers(config(root), "team", "run")
    train(make_state(), ckpt, 1, 6)
    ckpt.wait()
    os.remove(os.path.join(ckpt.storage.uri("step-6"), MARKER))  # as if the commit never came
    assert ckpt.latest().step == 3
    with pytest.raises(CheckpointError, match="step-6: has no commit marker"):
        ckpt.load(make_state(), ckpt.storage.uri("step-6"))
    again = checkpointers(config(root), "team", "run")
    assert sorted(again.storage.step_dirs()) == [3]


def test_explicit_uri_resume_and_fresh_start(root, checkpointers):
    ckpt = checkpointers(config(root, keep_last=0), "team", "run")
    train(make_state(), ckpt, 1, 6)
    ckpt.wait()
    uri = ckpt.storage.uri("step-3")
    other = make_state()
    assert checkpointers(config(root, resume=uri), "t2", "r2").resume(other).step == 3
    assert other.dataloader.position == 3
    assert checkpointers(config(root, resume=None), "team", "run").resume(make_state()) is None
    assert checkpointers(config(root), "team", "empty").resume(make_state()) is None


def test_replica_groups_other_than_the_first_do_not_write(root, checkpointers):
    ckpt = checkpointers(config(root), "team", "run", replica_group=1)
    train(make_state(), ckpt, 1, 6)
    assert ckpt.latest() is None and ckpt.metrics()["saves_started"] == 0


def test_preemption_saves_a_final_checkpoint(root, checkpointers):
    state = make_state()
    ckpt = checkpointers(config(root, interval_steps=100), "team", "run")
    guard = PreemptionGuard(ckpt).install()
    try:
        train(state, ckpt, 1, 4)
        assert guard.on_step_end(4, state) is False
        os.kill(os.getpid(), signal.SIGTERM)
        assert guard.requested
        assert guard.on_step_end(5, state) is True
    finally:
        guard.uninstall()
    assert ckpt.latest().step == 5


def test_preemption_skips_a_save_that_cannot_finish(root, checkpointers):
    ckpt = checkpointers(config(root, preemption_budget_s=5.0), "team", "run")
    ckpt.write_durations = [60.0]  # earlier saves took a minute
    guard = PreemptionGuard(ckpt)
    guard._handle(signal.SIGTERM, None)
    assert guard.on_step_end(7, make_state()) is True
    assert ckpt.latest() is None


@pytest.mark.parametrize("interval, want", [(3, 4), (0, 0)])
def test_failure_config_for_worker_group_restarts(interval, want):
    cfg = config("x", max_failures=4, interval_steps=interval)
    assert failure_config(cfg).max_failures == want


def test_async_saves_written_in_small_pieces_resume_exactly(root, checkpointers):
    reference = make_state()
    train(reference, None, 1, 3)
    ckpt = checkpointers(config(root, write_chunk_mb=0.001), "team", "run")  # 1 kB pieces
    train(make_state(), ckpt, 1, 3)
    ckpt.close()
    resumed = make_state()
    assert checkpointers(config(root), "team", "run").resume(resumed).step == 3
    assert same(full_params(resumed.model), full_params(reference.model))
