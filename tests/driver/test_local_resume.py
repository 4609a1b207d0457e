"""`runner run --local` as a user runs it, from a folder of their own, with the default
relative checkpoint root: Ctrl-C, then the same command again, goes on from the checkpoint
the first one saved (and says so on its first line); a second Ctrl-C still says what was
saved; SIGKILL of `runner run` ends the whole run. Real processes: the runner, the driver
with its embedded Ray, two CPU workers.

Ray runs the workers in folders of its own, so before the driver made its paths absolute
(driver/config/compose.py `fill_defaults`), a relative `checkpoint.root` wrote the checkpoints
under Ray's session folder: the summary named a path that did not exist and the next run
started from step 1.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.driver.conftest import ROOT
from tests.driver.test_cleanup import _gone
from tests.driver.test_interrupt import descendants

RUN = ROOT / "runs/examples/tiny-lm.yaml"
STEPS = ["--steps", "90", "--set", "run.name=resume", "--set", "data.size=1024"]


def start(folder: Path, name: str) -> subprocess.Popen:
    """`runner run --local` in `folder`, in a process group of its own (a terminal's
    foreground job); its output in `folder/<name>.txt`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    out = (folder / f"{name}.txt").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "run", "--local", str(RUN), *STEPS], cwd=folder,
        env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def rows(folder: Path) -> list[dict]:
    metrics = folder / "outputs/research/resume/metrics.jsonl"
    if not metrics.exists():
        return []
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.endswith("}")]


def wait_for_text(proc: subprocess.Popen, folder: Path, name: str, wanted: str,
                  timeout_s=120) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while wanted not in text(folder, name):
        assert proc.poll() is None, text(folder, name)
        assert time.monotonic() < deadline, f"no {wanted!r} in time"
        time.sleep(0.05)


def wait_for_step(proc: subprocess.Popen, folder: Path, step: int, timeout_s=300) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(r["step"] >= step for r in rows(folder)):
        assert proc.poll() is None, text(folder, "first")
        assert time.monotonic() < deadline, "not training in time"
        time.sleep(0.2)


def text(folder: Path, name: str) -> str:
    return (folder / f"{name}.txt").read_text().replace("\r", "\n")


def lines(folder: Path, name: str) -> list[str]:
    return [line for line in text(folder, name).splitlines() if line.strip()]


@pytest.mark.slow
def test_ctrl_c_then_the_same_command_resumes_where_it_stopped(tmp_path):
    first = start(tmp_path, "first")
    wait_for_step(first, tmp_path, 10)
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C at the terminal
    assert first.wait(timeout=300) == 130, text(tmp_path, "first")
    saved = re.search(r"newest committed checkpoint: (\S+)", text(tmp_path, "first"))
    assert saved, text(tmp_path, "first")
    path = Path(saved.group(1))
    assert path.is_dir() and path.is_relative_to(tmp_path / "outputs/checkpoints/research")
    step = int(path.name.removeprefix("step-"))

    again = start(tmp_path, "again")
    assert again.wait(timeout=600) == 0, text(tmp_path, "again")
    first_line = lines(tmp_path, "again")[0]
    assert first_line.startswith(f"resuming research/resume from step {step}: {path} "), first_line
    steps = [r["step"] for r in rows(tmp_path)]
    assert steps[-1] == 90 and steps.count(step + 1) == 1  # went on after the checkpoint
    assert "done: " in text(tmp_path, "again")


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_still_says_what_was_saved(tmp_path):
    run = start(tmp_path, "first")
    wait_for_step(run, tmp_path, 10)
    os.killpg(run.pid, signal.SIGINT)
    # Again once the run said it heard the first, as a user does: two signals that arrive
    # before the process's Python handler runs are one call of it (CPython keeps a flag per
    # signal), and under load that can take longer than any fixed pause.
    wait_for_text(run, tmp_path, "first", "again to stop at once")
    os.killpg(run.pid, signal.SIGINT)  # again: at once
    assert run.wait(timeout=120) == 130, text(tmp_path, "first")
    said = text(tmp_path, "first")
    assert re.search(r"stopped at once by a second SIGINT after step \d+", said), said
    assert re.search(r"  newest committed checkpoint: (\S+|none)", said), said
    assert f"  outputs: {tmp_path / 'outputs/research/resume'} " in said
    assert "Traceback" not in said and "Aborted" not in said


@pytest.mark.slow
def test_sigkill_of_runner_run_ends_the_whole_run(tmp_path):
    run = start(tmp_path, "first")
    try:
        wait_for_step(run, tmp_path, 5)
        everything = descendants(run.pid)
        assert len(everything) >= 6, everything
        run.send_signal(signal.SIGKILL)  # runner run itself, not its group
        run.wait(timeout=30)
    finally:
        run.kill()
    assert _gone(everything) == {}
    count = len(rows(tmp_path))
    time.sleep(2)
    assert len(rows(tmp_path)) == count  # nobody trains any more
