"""Resume on another layout: checkpoints saved by 1 process or 2 FSDP2 ranks, loaded by 1, 2
and 3 FSDP2 ranks (gloo, CPU).

Equality across world sizes: the maths is the same (a global batch split evenly, gradients
averaged), but each layout sums gradients in a different order, so float32 results agree to
rounding (about 1e-6 relative), not bit for bit. Same world size: bitwise.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp
from torch.distributed.checkpoint import FileSystemReader

from driver.checkpoint import Checkpointer
from driver.checkpoint.auth import KEY_ENV
from tests.checkpoint.ranks import LAST_STEP, ddp_rank, preempt_rank, run_rank
from tests.checkpoint.toy import config, full_params, make_state, train


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn(world_size: int, root: str, out: str, tag: str, resume: str = "", key=None) -> dict:
    """Run `run_rank` on `world_size` ranks; `key`: their checkpoint secret (default: the
    test's own local key, tests/checkpoint/conftest.py)."""
    args = (world_size, free_port(), root, out, tag, resume)
    with pytest.MonkeyPatch.context() as env:
        if key is not None:
            env.setenv(KEY_ENV, key)  # the spawned ranks inherit it
        mp.spawn(run_rank, args=args, nprocs=world_size, join=True)
    return torch.load(f"{out}/{tag}.pt")


SHARED_KEY = "reshard-tests-shared-secret"
"""The secret of `saved_by_two`'s checkpoints and of the runs that resume them: the fixture
outlives each test's own local key."""


@pytest.fixture(scope="module")
def saved_by_two(tmp_path_factory):
    """An uninterrupted 2-rank run to LAST_STEP that committed step-3 and step-6 on the way."""
    base = tmp_path_factory.mktemp("reshard")
    root, out = str(base / "ckpt"), str(base)
    reference = spawn(2, root, out, "ref", key=SHARED_KEY)
    return root, out, reference, f"{root}/team/ref/step-3"


def _compare(got: dict, want: dict, bitwise: bool) -> None:
    assert got["position"] == want["position"] == LAST_STEP
    for name, value in want["params"].items():
        if bitwise:
            assert torch.equal(got["params"][name], value), name
        else:
            torch.testing.assert_close(got["params"][name], value, rtol=1e-5, atol=1e-6)


def test_single_process_checkpoint_resumes_on_two_fsdp_ranks(tmp_path):
    root = str(tmp_path / "ckpt")
    state = make_state()
    ckpt = Checkpointer(config(root, keep_last=0), "team", "single")
    train(state, ckpt, 1, LAST_STEP)
    ckpt.close()
    reference = {"params": full_params(state.model), "position": state.dataloader.position}
    got = spawn(2, root, str(tmp_path), "two", resume=f"{root}/team/single/step-3")
    _compare(got, reference, bitwise=False)


@pytest.mark.slow
def test_resume_on_three_ranks(saved_by_two):
    root, out, reference, step3 = saved_by_two
    _compare(spawn(3, root, out, "three", step3, SHARED_KEY), reference, bitwise=False)


@pytest.mark.slow
def test_resume_on_one_rank(saved_by_two):
    root, out, reference, step3 = saved_by_two
    _compare(spawn(1, root, out, "one", step3, SHARED_KEY), reference, bitwise=False)


@pytest.mark.slow
def test_resume_on_same_layout_is_bitwise(saved_by_two):
    root, out, reference, step3 = saved_by_two
    _compare(spawn(2, root, out, "two", step3, SHARED_KEY), reference, bitwise=True)


@pytest.mark.slow
def test_sigterm_on_one_rank_stops_all_ranks_after_a_final_save(tmp_path):
    root = str(tmp_path / "ckpt")
    args = (2, free_port(), root, str(tmp_path), "preempt", "")
    mp.spawn(preempt_rank, args=args, nprocs=2, join=True)
    for rank in (0, 1):
        result = torch.load(tmp_path / f"preempt-{rank}.pt", weights_only=False)
        assert result["stopped"] == 4 and result["latest"].step == 4


@pytest.mark.slow
def test_ranks_that_agree_every_few_steps_stop_at_the_same_later_step(tmp_path):
    root = str(tmp_path / "ckpt")
    args = (2, free_port(), root, str(tmp_path), "paced", "")
    mp.spawn(preempt_rank, args=args, nprocs=2, join=True)
    results = [torch.load(tmp_path / f"paced-{r}.pt", weights_only=False) for r in (0, 1)]
    stopped = {result["stopped"] for result in results}
    assert len(stopped) == 1 and 4 <= stopped.pop() <= LAST_STEP
    assert results[0]["latest"].step == results[0]["stopped"]


@pytest.mark.slow
def test_ddp_only_replica_zero_snapshots_the_model_and_resume_is_bitwise(tmp_path):
    root, out = str(tmp_path / "ckpt"), str(tmp_path)

    def run(tag: str, resume: str = "") -> dict:
        args = (2, free_port(), root, out, tag, resume)
        mp.spawn(ddp_rank, args=args, nprocs=2, join=True)
        return torch.load(f"{out}/{tag}.pt")

    reference = run("ddp")
    step3 = tmp_path / "ckpt" / "team" / "ddp" / "step-3"
    files: dict[str, set[str]] = {}
    for index, info in FileSystemReader(str(step3)).read_metadata().storage_data.items():
        files.setdefault(info.relative_path, set()).add(index.fqn.split(".")[0])
    replica0 = {"model", "optim", "lr_scheduler", "rng", "dataloader", "step"}
    assert files == {"__0_0.distcp": replica0, "__1_0.distcp": {"rng", "dataloader"}}
    # Bitwise equality needs rank 1's own RNG back too (dropout differs per rank).
    _compare(run("ddp-resumed", resume=str(step3)), reference, bitwise=True)
