"""The replica group member's liveness watchdog (driver.ft.watchdog) in real processes: a
step that outlives `ft.watchdog_s` ends this process with SIGKILL, and its group mates on
this host with it, a stopped (SIGSTOP) mate included: Ray's kill of a stopped actor has
been seen to leave it, holding its bundle, so the group's replacement waited for good."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from driver.ft.watchdog import Watchdog, group_mates

ROOT = Path(__file__).resolve().parents[2]
MEMBER = """
import os, signal, subprocess, sys, time
from driver.ft.watchdog import Watchdog
mate = subprocess.Popen(["sleep", "120"])
os.kill(mate.pid, signal.SIGSTOP)  # a hung member of the group
print(mate.pid, flush=True)
watchdog = Watchdog(float(sys.argv[1]), mates=[mate.pid])
with watchdog.step(7):
    time.sleep(60)  # stuck in a collective with the stopped mate
"""


def gone(pid: int) -> bool:
    """Whether `pid` ended (no such process, or a zombie nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_an_overdue_step_ends_this_member_and_its_stopped_mate():
    member = subprocess.Popen([sys.executable, "-c", MEMBER, "0.3"], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        mate = int(member.stdout.readline())
        assert member.wait(timeout=30) == -9  # SIGKILL, well before its 60 s step ends
        deadline = time.monotonic() + 10
        while not gone(mate):
            assert time.monotonic() < deadline, "the stopped mate outlived the watchdog"
            time.sleep(0.05)
    finally:
        member.kill()


def test_a_step_in_time_ends_nothing_and_no_timeout_watches_nothing():
    ticks = iter([0.0, 0.5, 2.0])
    before = threading.active_count()
    # No watching thread: woken inside the step, it would read this fake clock, see the
    # step 1 s late and SIGKILL this test's own process (a pytest worker) without a word.
    watchdog = Watchdog(1.0, clock=lambda: next(ticks), watch=False)
    assert threading.active_count() == before
    assert watchdog.overdue() is None  # not armed
    with watchdog.step(1):
        assert watchdog.overdue() is None  # 0.5 s into a 1 s limit
        assert watchdog.overdue() == 1.0  # 2 s: one second late
    watchdog.close()
    assert Watchdog(0).overdue() is None and Watchdog(None).mates == []


def test_without_a_process_group_there_are_no_mates():
    assert group_mates() == []
