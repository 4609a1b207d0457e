"""tests/support/xdist_crash.py: after a pytest-xdist worker dies in a test, the run goes on
to its end. Real pytest runs on two workers (`--dist loadfile`) over small test files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.xdist_crash import first_not_done, still_to_run

ROOT = Path(__file__).resolve().parents[2]


T, F = True, False


@pytest.mark.parametrize(
    ("workload", "crashed", "want"),
    [
        ({"a": {"a1": T, "a2": F, "a3": F}}, "a2", {"a": {"a1": T, "a2": T, "a3": F}}),
        ({"a": {"a1": T, "a2": F}}, "a2", {}),  # the crashed test was its file's last
        ({"a": {"a1": T}, "b": {"b1": F, "b2": F}}, "b1", {"b": {"b1": T, "b2": F}}),
        ({"a": {"a1": F}, "b": {"b1": F}}, "a1", {"b": {"b1": F}}),  # a file not begun
        ({"a": {"a1": T}, "b": {"b1": T}}, "x", {}),  # finished files are not work
    ],
)
def test_still_to_run(workload, crashed, want):
    assert still_to_run(workload, crashed) == want


@pytest.mark.parametrize(
    ("workload", "want"),
    [
        ({"a": {"a1": T, "a2": F}, "b": {"b1": F}}, "a2"),
        ({"a": {"a1": T}, "b": {"b1": F}}, "b1"),
        ({"a": {"a1": T}}, None),
        ({}, None),
    ],
)
def test_first_not_done(workload, want):
    assert first_not_done(workload) == want


PASSING = "def test_{n}():\n    pass\n"
DYING = "import os\n\n\ndef test_dies():\n    os._exit(child())\n\n\ndef test_after():\n    pass\n"
CHILD = """

def child():
    import subprocess, sys
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    open("child.pid", "w").write(str(proc.pid))
    return 1
"""
"""The dying test leaves a child (as a test's Ray or synchronizer) when its worker exits."""


def suite(folder: Path) -> None:
    """Files of many tests first (xdist runs the big ones first), a file whose first test
    ends its worker, and files of one test, which end the run."""
    for name, count in (("big_a", 6), ("big_b", 5), ("small_c", 1), ("small_d", 1), ("small_e", 1)):
        text = "\n\n".join(PASSING.format(n=n) for n in range(count))
        (folder / f"test_{name}.py").write_text(text)
    (folder / "test_dying.py").write_text(DYING + "\n\ndef test_third():\n    pass\n" + CHILD)


def run_suite(folder: Path, *plugin: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile",
           "-p", "no:cacheprovider", *plugin, "-q", str(folder)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_a_worker_dying_in_a_test_fails_that_test_and_the_run_goes_on(tmp_path):
    suite(tmp_path)
    done = run_suite(tmp_path, "-p", "tests.support.xdist_crash")
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "1 failed, 16 passed" in text, text  # test_after and test_third ran, once each
    assert "test_dying.py::test_dies" in text and "crashed" in text, text
    assert "os._exit(1), called from:" in text and 'test_dying.py", line 5' in text, text
    assert "every thread at the exit:" in text and "most recent call first" in text, text
    assert gone(int((tmp_path / "child.pid").read_text()), within_s=10)  # killed with it


def gone(pid: int, within_s: float) -> bool:
    """Whether `pid` has ended (or is only a zombie) within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False
