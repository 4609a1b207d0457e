"""Ctrl-C and SIGTERM to the driver's whole process group (as a terminal or a supervisor
sends them) stop a run the way a SIGTERM to the driver alone does: the workers agree on a
final checkpoint, the summary prints, the exit code is 128 + the signal. Real processes:
the driver with its own embedded Ray, two CPU workers. The helpers here (the driver as its
own process, the processes it leaves) serve test_cleanup.py too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from driver.checkpoint.layout import MARKER
from tests.driver.conftest import ROOT, TINY_LM

QUICK = ["optimizer.warmup_steps=2", "data.size=1024", "run.team=t", "run.name=r"]


def start_driver(tmp_path: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    """The driver in a process group of its own, as a shell starts a foreground job (so a
    test can signal the whole group, as a terminal's Ctrl-C does); output in tmp_path."""
    args = [TINY_LM, *QUICK, f"checkpoint.root={tmp_path / 'ckpt'}"]
    args += [f"run.output_dir={tmp_path / 'out'}", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "driver.train", *args], cwd=ROOT, env=env,
        stdout=(tmp_path / "stdout.txt").open("w"), stderr=(tmp_path / "stderr.txt").open("w"),
        start_new_session=True,
    )  # fmt: skip


def wait_for_rows(proc: subprocess.Popen, tmp_path: Path, rows: int, timeout_s=300) -> None:
    """Until metrics.jsonl has `rows` rows (the run is training)."""
    metrics = tmp_path / "out" / "metrics.jsonl"
    deadline = time.monotonic() + timeout_s
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= rows):
        assert proc.poll() is None, f"the driver ended early: {output(tmp_path)}"
        assert time.monotonic() < deadline, "no training rows in time"
        time.sleep(0.2)


def output(tmp_path: Path) -> str:
    return (tmp_path / "stdout.txt").read_text() + (tmp_path / "stderr.txt").read_text()


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it (from /proc; whatever session they moved to)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat:
                children.setdefault(int(stat[1]), []).append(int(name))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo += children.get(current, [])
    return found


def alive(pids: set[int]) -> dict[int, str]:
    """The processes of `pids` still running (zombies waiting to be reaped do not count),
    with their command lines."""
    left = {}
    for pid in pids:
        stat = _stat(pid)
        if stat and stat[0] != "Z":
            try:
                left[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
    return left


def _stat(pid: int) -> list[str] | None:
    """(state, ppid, ...) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)]
)
def test_a_signal_to_the_process_group_saves_a_final_checkpoint(tmp_path, signum):
    proc = start_driver(tmp_path, "train.steps=3000", "checkpoint.interval_steps=1000")
    try:
        wait_for_rows(proc, tmp_path, 5)
        os.killpg(proc.pid, signum)  # the driver and every process of its group
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    text = output(tmp_path)
    assert code == 128 + signum, text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    stopped = summary["preempted_at"]
    assert 5 <= stopped < 3000 and summary["stopped_by"] == signal.Signals(signum).name
    assert summary["preempt_lost_steps"] == 0  # the final checkpoint holds the last step
    step = tmp_path / "ckpt" / "t" / "r" / f"step-{stopped}"
    assert summary["ckpt_uri"] == str(step) and (step / MARKER).exists()
    assert f"stopped by {signal.Signals(signum).name} after step {stopped}" in text
    assert "Traceback" not in text
    assert "Token authentication" not in text  # Ray's notice asks nothing of the user


@pytest.mark.parametrize("when", ["ray", "held"])
def test_ctrl_c_during_start_up_stops_at_once_and_leaves_nothing(tmp_path, when):
    """`ray`: the signal as soon as Ray's GCS server runs (ray.init waits for the raylet);
    `held`: once Ray is up, while the driver holds before starting its workers. The hold
    is on in both, so a quick ray.init still leaves the signal in start-up."""
    proc = start_driver(tmp_path, "train.steps=3000", "debug.hold_start_s=120")
    try:
        deadline = time.monotonic() + 120
        while not started_up_to(when, proc.pid, output(tmp_path)):
            assert proc.poll() is None and time.monotonic() < deadline, output(tmp_path)
            time.sleep(0.02)
        run = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    text = output(tmp_path)
    assert code == 130, text
    assert "stopped by SIGINT during start-up: nothing trained" in text, text
    assert "Traceback" not in text and "training workers" not in text
    deadline = time.monotonic() + 30
    while alive(run) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert alive(run) == {}


def started_up_to(when: str, pid: int, text: str) -> bool:
    """Whether the driver's start-up reached `when` (test_ctrl_c_during_start_up...)."""
    if when == "held":
        return "debug: start-up held" in text
    return any(_comm(p) == "gcs_server" for p in descendants(pid))


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.mark.slow
def test_ctrl_c_without_checkpoints_stops_at_once_with_a_summary(tmp_path):
    proc = start_driver(tmp_path, "train.steps=3000", "checkpoint.resume=null")
    try:
        wait_for_rows(proc, tmp_path, 5)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    text = output(tmp_path)
    assert code == 130 and "stopped by SIGINT (no checkpoint: checkpoints are off)" in text
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["stopped_by"] == "SIGINT"


@pytest.mark.parametrize("rows", [1, pytest.param(8, marks=pytest.mark.slow)])
def test_sigterm_to_a_torchft_run_stops_every_group_after_the_same_step(tmp_path, rows):
    """ft on, 2 replica groups: a SIGTERM to the driver alone (its workers' pods live on),
    in the run's first steps and later. The groups poll the driver's notice at their own
    pace; it rides on a step's reduce, so both stop after the same step: the lowest live
    group writes the final checkpoint and reports the run's figures, the exit is 143."""
    from tests.driver.test_termination import last_steps

    proc = start_driver(tmp_path, "ft=on", "train.steps=3000", "checkpoint.interval_steps=1000",
                        "debug.digest=true")  # fmt: skip
    try:
        wait_for_rows(proc, tmp_path, rows)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    text = output(tmp_path)
    assert code == 128 + signal.SIGTERM, text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    stopped = summary["preempted_at"]
    assert rows <= stopped < 3000 and summary["stopped_by"] == "SIGTERM", summary
    assert summary["preempt_lost_steps"] == 0, summary
    step = tmp_path / "ckpt" / "t" / "r" / f"step-{stopped}"
    assert summary["ckpt_uri"] == str(step) and (step / MARKER).exists()
    assert last_steps(tmp_path / "out") == {0: stopped, 1: stopped}  # after the same step
    assert f"stopped by SIGTERM after step {stopped}" in text
    assert "Traceback" not in text
