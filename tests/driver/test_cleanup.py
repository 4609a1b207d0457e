"""Nothing outlives the driver: killed outright (SIGKILL) mid-run, none of its processes
(Ray's daemons and agents, the run's actors, the training workers) is left running. And
the supervisor of an embedded run (driver/embedded/lean.py) on its own, without Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from driver.embedded.supervise import exit_code, kill_session, session_members
from tests.driver.conftest import ROOT
from tests.driver.test_interrupt import alive, descendants, start_driver, wait_for_rows


def _gone(pids: set[int], timeout_s: float = 30.0) -> dict[int, str]:
    deadline = time.monotonic() + timeout_s
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive(pids)


def test_no_process_outlives_a_killed_driver(tmp_path):
    proc = start_driver(tmp_path, "train.steps=3000", "checkpoint.resume=null")
    try:
        wait_for_rows(proc, tmp_path, 3)
        run = descendants(proc.pid)
        names = " ".join(alive(run).values())
        assert len(run) >= 8 and "raylet" in names and "RayTrainWorker" in names, names
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert _gone(run) == {}
    metrics = tmp_path / "out" / "metrics.jsonl"
    rows = len(metrics.read_text().splitlines())
    time.sleep(2)
    assert len(metrics.read_text().splitlines()) == rows  # nobody writes any more


SUPERVISED = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from driver.embedded.supervise import supervise

    def run():
        subprocess.Popen(["sleep", "300"])  # stands for a Ray daemon of the run
        try:  # the test signals once it reads this line: inside the `try`
            print("child", os.getpid(), os.getsid(0), flush=True)
            time.sleep(60)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            return 7
        return 0

    sys.exit(supervise(run))
    """
)


def _supervised(tmp_path):
    out = tmp_path / "out.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISED], cwd=ROOT, stdout=out.open("w"),
                            env=env, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while "child" not in out.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    _, pid, sid = out.read_text().split()[:3]
    assert pid == sid and int(sid) != proc.pid  # the run has a session of its own
    deadline = time.monotonic() + 10
    while len(session_members(int(sid))) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc, out, int(sid)


def test_the_group_signal_reaches_the_run_once_and_its_session_is_cleaned(tmp_path):
    proc, out, sid = _supervised(tmp_path)
    members = set(session_members(sid))
    assert len(members) == 3  # the run, its reaper, its `sleep`
    os.killpg(proc.pid, signal.SIGINT)  # the run's session is not in this group
    assert proc.wait(timeout=30) == 7  # forwarded once: the run handled it, its code
    assert "interrupted" in out.read_text()
    assert _gone(members) == {}  # the `sleep` it left behind was killed


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_when_the_supervisor_dies_its_run_dies(tmp_path, signum):
    proc, _, sid = _supervised(tmp_path)
    members = set(session_members(sid))
    if signum == signal.SIGKILL:
        proc.kill()  # no chance to clean up: the kernel and the reaper do it
    else:
        os.kill(proc.pid, signum)  # forwarded: the run ends by it, the rest is killed
    proc.wait(timeout=30)
    assert _gone(members) == {}


@pytest.mark.parametrize("status, code", [(0, 0), (2 << 8, 2), (signal.SIGKILL, 137)])
def test_exit_code_of_a_wait_status(status, code):
    assert exit_code(status) == code


def test_kill_session_kills_every_member():
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    assert kill_session(proc.pid) == 1
    assert proc.wait(timeout=10) == -signal.SIGKILL
