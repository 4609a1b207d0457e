"""chDB installs ClickHouse's handlers for the fatal signals as it loads, replacing
Python's faulthandler: a native crash anywhere in the process (torch, Ray, gloo, chDB) then
ends it without a word. `observability.store.chdb_session_module` puts faulthandler back.
Real processes that crash on purpose (a read of address 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CRASH = "import ctypes; ctypes.string_at(0)"
STRING_STDERR = (
    "import io, sys; from observability.store import chdb_session_module; "
    "sys.stderr = io.StringIO(); "
)
"""A `sys.stderr` without a file descriptor (a capture) as chDB first loads."""


def crash_after(load: str) -> tuple[int | None, str]:
    """(exit code, None if it was still running after 20 s; its stderr)."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "PYTHONPATH": str(ROOT)}
    code = f"{load}\n{CRASH}\n"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _, err = proc.communicate(timeout=20)
        return proc.returncode, err
    except subprocess.TimeoutExpired:  # chDB's handler can wait for good instead
        proc.kill()
        return None, proc.communicate()[1]


@pytest.mark.parametrize(
    ("load", "says"),
    [
        ("pass", True),  # faulthandler alone: the crash is told
        ("import chdb.session", False),  # chDB's handler took it: not a word (or a hang)
        ("from observability.store import chdb_session_module; chdb_session_module()", True),
        (STRING_STDERR + "chdb_session_module(); sys.stderr = sys.__stderr__", True),
    ],
)
def test_a_native_crash_is_told_after_chdb_loads_through_the_store(load, says):
    code, err = crash_after(load)
    assert code != 0
    told = "Fatal Python error: Segmentation fault" in err
    assert told == says, err[-2000:]
    if says:
        assert code == -11 and 'File "<string>", line 2' in err  # the crashing line
