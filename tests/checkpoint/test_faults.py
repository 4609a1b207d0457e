"""Faults: a killed writer, corrupt/truncated/incompatible checkpoints, full or read-only disks."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from driver.checkpoint import CheckpointError
from driver.checkpoint.loading import compatibility_problems
from tests.checkpoint.toy import config, full_params, make_state, train

REPO = Path(__file__).resolve().parents[2]


def test_killed_mid_write_resumes_from_previous_commit(root, checkpointers):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = [sys.executable, "-u", str(Path(__file__).with_name("slow_write_run.py")), root]
    proc = subprocess.Popen(script, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.strip())
            if "WRITING" in lines and "STAGED" in lines:
                break
        assert lines[-2:] in (["WRITING", "STAGED"], ["STAGED", "WRITING"]), lines
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    partial = Path(root, "team", "run", "step-6")
    assert any(partial.glob("*.distcp")) and not (partial / ".metadata").exists()

    ckpt = checkpointers(config(root), "team", "run")  # start-up removes the partial write
    assert not partial.exists() and ckpt.latest().step == 3
    state = make_state()
    assert ckpt.resume(state).step == 3 and state.dataloader.position == 3


@pytest.fixture
def saved(root, checkpointers):
    """A run with committed checkpoints at steps 3 and 6; returns step-6's path."""
    ckpt = checkpointers(config(root), "team", "run")
    train(make_state(), ckpt, 1, 6)
    ckpt.wait()
    return Path(ckpt.storage.uri("step-6"))


def test_truncated_shard_is_refused_naming_the_checkpoint(saved, checkpointers, root):
    shard = next(saved.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    ckpt = checkpointers(config(root), "team", "run")
    with pytest.raises(CheckpointError) as err:
        ckpt.load(make_state())
    message = str(err.value)
    assert message.startswith(f"checkpoint {saved}: is truncated or corrupt: __0_0.distcp")
    assert "\n" not in message


def test_garbage_metadata_is_refused(saved, checkpointers, root):
    meta = saved / ".metadata"
    meta.write_bytes(b"\x00" * meta.stat().st_size)
    with pytest.raises(CheckpointError, match=rf"checkpoint {saved}: .metadata changed after"):
        checkpointers(config(root), "team", "run").load(make_state())


def test_garbage_shard_of_same_size_is_refused(saved, checkpointers, root):
    shard = next(saved.glob("*.distcp"))
    shard.write_bytes(b"\x07" * shard.stat().st_size)
    with pytest.raises(CheckpointError, match=rf"checkpoint {saved}: cannot be read"):
        checkpointers(config(root), "team", "run").load(make_state())


def test_incompatible_model_is_refused(saved, checkpointers, root):
    ckpt = checkpointers(config(root), "team", "run")
    with pytest.raises(CheckpointError) as err:
        ckpt.load(make_state(hidden=64))
    assert str(err.value).startswith(f"checkpoint {saved}: is incompatible with this model: ")
    assert "model.0.weight has shape [32, 16] in the checkpoint, [64, 16] here" in str(err.value)


def test_missing_checkpoint_is_refused(checkpointers, root, tmp_path):
    ckpt = checkpointers(config(root), "team", "run")
    with pytest.raises(CheckpointError, match="does not exist"):
        ckpt.load(make_state(), str(tmp_path / "nope" / "step-1"))


@pytest.mark.parametrize(
    "tensors, saved, objects, keys, want",
    [
        ({"model.w": (2, 2)}, {"model.w": (2, 2)}, {"step"}, {"model.w", "step"}, []),
        ({"model.w": (2, 2)}, {}, set(), set(), ["model.w is missing"]),
        (
            {},
            {"model.v": (1,)},
            set(),
            {"model.v"},
            ["model.v is in the checkpoint but not in the model"],
        ),
        ({}, {}, {"lr_scheduler.last_epoch"}, set(), ["lr_scheduler.last_epoch is missing"]),
    ],
)
def test_compatibility_problems(tensors, saved, objects, keys, want):
    assert compatibility_problems(tensors, saved, objects, keys) == want


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB tmpfs (needs CAP_SYS_ADMIN); yields its path, unmounts afterwards."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def _assert_failed_but_previous_valid(ckpt, state, failed_step: int, reason: str) -> None:
    assert ckpt.wait() is False
    m = ckpt.metrics()
    assert (m["saves_failed"], m["last_committed_step"]) == (1, 3)
    assert f"step-{failed_step}: write failed" in ckpt.last_error and reason in ckpt.last_error
    train(state, None, failed_step + 1, failed_step + 2)  # training goes on
    restored = make_state()
    assert ckpt.load(restored).step == 3 and restored.dataloader.position == 3


def test_read_only_destination(small_disk, checkpointers):
    ckpt = checkpointers(config(str(small_disk)), "team", "run")
    state = make_state()
    train(state, ckpt, 1, 3)
    assert ckpt.wait()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    train(state, ckpt, 4, 6)
    _assert_failed_but_previous_valid(ckpt, state, 6, "Read-only file system")


def test_full_destination(small_disk, checkpointers):
    ckpt = checkpointers(config(str(small_disk)), "team", "run")
    state = make_state()
    train(state, ckpt, 1, 3)
    assert ckpt.wait()
    with open(small_disk / "filler", "wb") as filler:  # fill the disk to the last byte
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass
    train(state, ckpt, 4, 6)
    _assert_failed_but_previous_valid(ckpt, state, 6, "No space left on device")
    assert not (small_disk / "team" / "run" / "step-6").exists()  # partial write removed


def test_file_size_limit_refuses_the_write(root, checkpointers):
    """Where tmpfs cannot be mounted, RLIMIT_FSIZE refuses writes the same way (EFBIG)."""
    ckpt = checkpointers(config(root), "team", "run")
    state = make_state()
    train(state, ckpt, 1, 3)
    assert ckpt.wait()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        train(state, ckpt, 4, 6)
        ckpt.wait()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    _assert_failed_but_previous_valid(ckpt, state, 6, "File too large")
    assert full_params(state.model)
