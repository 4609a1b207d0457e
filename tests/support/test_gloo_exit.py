"""exit_now: what a test process wrote is kept, its code is the one given, and nothing
Python would run at finalization runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_output_is_flushed_and_the_code_kept_without_finalization():
    code = ("import atexit, sys; from tests.support.gloo_exit import exit_now; "
            "atexit.register(print, 'finalized'); print('out', end=''); "
            "print('err', end='', file=sys.stderr); exit_now(3)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (3, "out", "err")
