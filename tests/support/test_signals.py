"""The signal masks a failing signal test prints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.support.signals import describe_tree, masks, signal_summary

STATUS = "Name:\tpython\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n"


@pytest.mark.parametrize(
    ("blk", "ign", "cgt", "summary"),
    [
        ("0", "0", "0", "INT: default, TERM: default"),
        ("0", "2", "0", "INT: SigIgn, TERM: default"),
        ("2", "0", "4002", "INT: SigBlk+SigCgt, TERM: SigCgt"),
        ("4000", "0", "0", "INT: default, TERM: SigBlk"),
    ],
)
def test_summary_names_the_masks_holding_each_signal(blk, ign, cgt, summary):
    status = STATUS + f"SigBlk:\t{blk}\nSigIgn:\t{ign}\nSigCgt:\t{cgt}\n"
    assert signal_summary(masks(status)) == summary


def test_the_tree_starts_with_its_root_and_shows_an_ignored_sigint():
    # a child of known state: this test process's own SIGINT depends on the tests before it
    code = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); " \
           "print('ready', flush=True); time.sleep(60)"  # fmt: skip
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        lines = describe_tree(os.getpid()).splitlines()
        assert lines[0].startswith(f"{os.getpid()} (parent {os.getppid()}) state R")
        mine = [line for line in lines if line.startswith(f"{child.pid} (parent {os.getpid()})")]
        assert len(mine) == 1 and "INT: SigIgn," in mine[0], lines
    finally:
        child.kill()
        child.wait()


def test_a_process_the_tests_start_prints_its_stacks_on_a_native_crash():
    # tests/conftest.py: what a native abort in a rank or a Ray worker leaves to read
    code = "import ctypes; print('started', flush=True); ctypes.CDLL(None).abort()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGABRT and done.stdout == "started\n"
    assert "Fatal Python error: Aborted" in done.stderr and 'File "<string>"' in done.stderr
