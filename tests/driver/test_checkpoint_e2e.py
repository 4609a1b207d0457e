"""Checkpointing end to end through the driver (`driver.train.main`), two gloo workers on one
embedded Ray: periodic async saves with commit markers and retention, a listener actor
called after each commit, worker-group restarts from the last committed checkpoint and
then a crash bundle, automatic resume that ignores a partial checkpoint and matches an
uninterrupted run bit for bit. Slow: resume from a URI, on one worker, after SIGTERM, and
with a read-only destination."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from driver.aux.listeners import listener_name
from driver.checkpoint.layout import MARKER
from driver.output.summary import checkpoint_lines
from driver.train import PREEMPTED, main
from tests.driver.conftest import ROOT, TINY_LM

pytestmark = pytest.mark.timeout(1200)
"""Whichever test of the module runs first also builds its module fixtures: four driver
runs (a crash, its restart, the resume, the reference). Under two test workers beside two
busy loops two tests in a row ran past pytest's 600 s doing so (the replacement worker
builds them again), while a one-run test of the module took 196 s."""
STEPS = 8
FAST = [
    f"train.steps={STEPS}",
    "optimizer.warmup_steps=2",
    "data.size=1024",
    "logging.format=json",
    "checkpoint.interval_steps=3",
    "checkpoint.keep_last=2",
    "run.team=t",
]


def drive(base: Path, name: str, *extra: str, out: str = "", root: Path | None = None):
    """Run the driver as `python -m driver.train` would; (exit code, output folder)."""
    folder = base / "out" / (out or name)
    args = [TINY_LM, *FAST, f"checkpoint.root={root or base / 'ckpt'}", f"run.name={name}"]
    return main([*args, f"run.output_dir={folder}", *extra]), folder


def losses(out: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(row["step"], row["loss"]) for row in rows]


def model_params(step_dir: Path, tmp: Path) -> dict[str, torch.Tensor]:
    """The model tensors of a DCP checkpoint, as one torch.save file."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    target = tmp / f"{step_dir.parent.name}-{step_dir.name}.pt"
    dcp_to_torch_save(str(step_dir), str(target))
    return torch.load(target, weights_only=False)["model"]


class Listener:
    """An auxiliary worker that registers for checkpoint callbacks."""

    def __init__(self):
        self.calls: list[tuple[int, str]] = []

    def on_checkpoint(self, step: int, uri: str) -> None:
        self.calls.append((step, uri, os.path.exists(os.path.join(uri, MARKER))))

    def seen(self) -> list[tuple[int, str, bool]]:
        return self.calls


@pytest.fixture(scope="module")
def crashed_then_resumed(ray_local, tmp_path_factory):
    """Run "crash" fails at step 5 on every rank, is restarted once by Ray Train from its
    last committed checkpoint (step-3), fails again and leaves a crash bundle; a partial
    step-7 is planted; the same run started again resumes on its own and finishes.
    A listener actor is registered throughout."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    listener = ray_local.remote(num_cpus=0)(Listener).options(name=listener_name("rec")).remote()
    base = tmp_path_factory.mktemp("ckpt-e2e")
    fail = ["debug.fail_at_step=4", "debug.fail_rank=-1", "checkpoint.max_failures=1"]
    code, crashed = drive(base, "crash", *fail)
    assert code == 1
    run = base / "ckpt" / "t" / "crash"
    partial = run / "step-7"  # as if a kill had interrupted a write: no commit marker
    shutil.copytree(run / "step-3", partial)
    (partial / MARKER).unlink()
    code, resumed = drive(base, "crash", out="again")
    assert code == 0
    calls = ray_local.get(listener.seen.remote())
    ray_local.kill(listener)
    return base, crashed, resumed, calls


def test_restart_from_last_commit_then_crash_bundle(crashed_then_resumed):
    base, crashed, _, _ = crashed_then_resumed
    got = losses(crashed)
    # attempt 0: steps 1-5; the restarted group resumes after step 3 and fails again
    assert [step for step, _ in got] == [1, 2, 3, 4, 5, 4, 5]
    assert got[5:] == got[3:5]  # the same losses, bit for bit (data position, RNG, optimizer)
    bundle = list(crashed.glob("crash-*"))
    assert len(bundle) == 1 and "injected failure" in (bundle[0] / "error.txt").read_text()
    assert "the worker group was restarted 1 times" in (bundle[0] / "driver.log").read_text()


def test_auto_resume_ignores_partial_and_applies_retention(crashed_then_resumed):
    base, crashed, resumed, calls = crashed_then_resumed
    run = base / "ckpt" / "t" / "crash"
    got = losses(resumed)
    assert [step for step, _ in got] == [4, 5, 6, 7, 8] and got[:2] == losses(crashed)[3:5]
    assert sorted(p.name for p in run.glob("step-*")) == ["step-6", "step-8"]  # keep_last=2
    for step in (6, 8):
        folder = run / f"step-{step}"
        files = {p.name: p.stat() for p in folder.iterdir()}
        assert {"__0_0.distcp", "__1_0.distcp", ".metadata", MARKER} <= set(files)
        marker = json.loads((folder / MARKER).read_text())
        assert marker["step"] == step and marker["world_size"] == 2
        newest_other = max(s.st_mtime_ns for name, s in files.items() if name != MARKER)
        assert files[MARKER].st_mtime_ns >= newest_other  # the marker is written last
    # rank 0 called the listener after each commit (step-3 once: the restart resumed it)
    assert calls == [(step, str(run / f"step-{step}"), True) for step in (3, 6, 8)]
    rows = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("ckpt_blocked_s", -1) >= 0] == [6]  # 8: at end
    assert rows[0]["ckpt_committed_step"] == 3 and rows[-1]["ckpt_failures"] == 0
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["ckpt_uri"] == str(run / "step-8") and summary["restarts"] == 0


@pytest.fixture(scope="module")
def reference(ray_local, crashed_then_resumed):
    """An uninterrupted run of the same config."""
    base = crashed_then_resumed[0]
    code, out = drive(base, "ref")
    assert code == 0
    return base, out


@pytest.mark.slow
def test_resumed_run_matches_uninterrupted_bit_for_bit(crashed_then_resumed, reference):
    base, crashed, resumed, _ = crashed_then_resumed
    want = losses(reference[1])
    assert losses(crashed) == want[:5] + want[3:5] and losses(resumed) == want[3:]
    ours = model_params(base / "ckpt/t/crash/step-8", base)
    theirs = model_params(base / "ckpt/t/ref/step-8", base)
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


@pytest.mark.slow
def test_resume_from_uri_on_one_worker(reference):
    """An explicit URI, loaded by one worker that takes the same global batch (32): the same
    parameters at step 8 as the two-worker run, to float32 rounding (sums in another order)."""
    base, _ = reference
    uri = base / "ckpt" / "t" / "ref" / "step-6"
    one = ["parallelism.workers=1", "train.micro_batch_size=32", f"checkpoint.resume={uri}"]
    code, out = drive(base, "one", *one)
    assert code == 0
    assert [step for step, _ in losses(out)] == [7, 8]  # (a row's loss is rank 0's share)
    ours = model_params(base / "ckpt/t/one/step-8", base)
    theirs = model_params(base / "ckpt/t/ref/step-8", base)
    for key, value in theirs.items():
        torch.testing.assert_close(ours[key], value, rtol=1e-4, atol=1e-6)


@pytest.fixture
def read_only_disk(tmp_path):
    """A real tmpfs (needs CAP_SYS_ADMIN) that the test remounts read-only."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)])
    if done.returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.mark.slow
def test_a_read_only_destination_is_refused_before_training_in_one_line(
    ray_local, read_only_disk, capsys
):
    """A checkpoint root that became read-only (its checkpoints still readable) is found by
    the storage check before Ray Train starts (driver/checkpoint/reach.py): one line naming
    checkpoint.root, the folder and the reason, exit 1, nothing trained, the committed
    checkpoint untouched. (Saves that fail while training goes on: tests/driver/test_disk.py.)"""
    base = read_only_disk.parent
    code, _ = drive(base, "ro", "train.steps=3", root=read_only_disk)
    assert code == 0
    subprocess.run(["mount", "-o", "remount,ro", str(read_only_disk)], check=True)
    capsys.readouterr()
    code, out = drive(base, "ro", out="ro-again", root=read_only_disk)
    assert code == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "checkpoint.root: cannot write " in errors[0]
    assert str(read_only_disk / "t" / "ro") in errors[0] and "Read-only file system" in errors[0]
    assert not (out / "metrics.jsonl").exists()
    assert (read_only_disk / "t" / "ro" / "step-3" / MARKER).exists()


@pytest.mark.slow
def test_sigterm_saves_a_final_checkpoint_and_exits(tmp_path):
    """The driver as its own process (its own Ray): SIGTERM mid-run -> final save, exit 143."""
    out, root = tmp_path / "out", tmp_path / "ckpt"
    args = [TINY_LM, *FAST, "train.steps=400", "checkpoint.interval_steps=1000"]
    args += [f"checkpoint.root={root}", "run.name=pre", f"run.output_dir={out}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "driver.train", *args], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 240
        metrics = out / "metrics.jsonl"
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 5):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == PREEMPTED
    finally:
        proc.kill()
    summary = json.loads((out / "summary.json").read_text())
    stopped = summary["preempted_at"]
    assert 5 <= stopped < 400 and summary["ckpt_uri"] == str(root / "t/pre" / f"step-{stopped}")
    assert (root / "t" / "pre" / f"step-{stopped}" / MARKER).exists()


@pytest.mark.parametrize(
    "summary, want",
    [
        ({"steps": 5}, []),
        (
            {"steps": 5, "ckpt_committed_step": 5, "ckpt_uri": "r/step-5", "restarts": 1},
            ["  worker group restarted 1 times", "  newest committed checkpoint: r/step-5"],
        ),
        (
            {"steps": 0, "ckpt_committed_step": 8, "ckpt_uri": "r/step-8"},
            [
                "  newest committed checkpoint: r/step-8",
                "  resumed at step 8: nothing left to train (raise train.steps, or start over"
                " with checkpoint.resume=null)",
            ],
        ),
        (
            {"steps": 4, "ckpt_committed_step": -1, "ckpt_failures": 2, "ckpt_error": "e"},
            ["  newest committed checkpoint: none", "  checkpoint saves failed: 2 (last: e)"],
        ),
        (
            {"steps": 9, "ckpt_committed_step": 9, "ckpt_uri": "u", "preempted_at": 9,
             "preempt_reason": "a save takes ~0.1s, 24.9s left"},
            ["  newest committed checkpoint: u",
             "  stopped by SIGTERM after step 9 (a save takes ~0.1s, 24.9s left)"],
        ),
        (
            {"steps": 9, "ckpt_committed_step": 9, "ckpt_uri": "u", "preempted_at": 9,
             "preempt_reason": "r", "preempt_lost_steps": 0},
            ["  newest committed checkpoint: u", "  stopped by SIGTERM after step 9 (r)",
             "  the stop cost no steps: the final checkpoint holds the last"],
        ),
        (
            {"steps": 9, "ckpt_committed_step": 6, "ckpt_uri": "u", "preempted_at": 9,
             "preempt_reason": "a save takes ~40.0s, only 24.9s left", "preempt_lost_steps": 3},
            ["  newest committed checkpoint: u",
             "  stopped by SIGTERM after step 9 (a save takes ~40.0s, only 24.9s left)",
             "  the stop cost 3 steps (trained again on resume)"],
        ),
    ],
)  # fmt: skip
def test_summary_checkpoint_lines(summary, want):
    assert checkpoint_lines(summary) == want


@pytest.mark.parametrize(
    ("stopped", "committed", "start", "lost"),
    [(9, 9, 0, 0), (9, 6, 0, 3), (9, None, 0, 9), (9, None, 4, 5), (4, 6, 6, 0)],
)
def test_what_a_stop_cost(stopped, committed, start, lost):
    from driver.checkpoint.session import lost_steps

    assert lost_steps(stopped, committed, start) == lost
