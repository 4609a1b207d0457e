"""runner.localchild: a local run's process lives and dies with `runner run`, and Ctrl-C
reaches it once per press while `runner run` waits for its last words."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from tests.runner.conftest import ROOT

PARENT = textwrap.dedent(
    """
    import sys
    from runner.localchild import run_child
    code = run_child([sys.executable, "-c", sys.argv[1]], ".", {})
    print("child ended", code, flush=True)
    sys.exit(code)
    """
)
CHILD = textwrap.dedent(
    """
    import os, signal, time
    seen = []
    signal.signal(signal.SIGINT, lambda *_: seen.append(1))
    print(os.getpid(), flush=True)
    while len(seen) < 2:
        time.sleep(0.05)
    print("two interrupts", flush=True)
    raise SystemExit(130)
    """
)


def start(child: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PARENT, child], cwd=ROOT, text=True, stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
    )  # fmt: skip


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].startswith("Z")  # dead, not yet reaped
    except OSError:
        return True


def test_the_child_dies_with_runner_run():
    parent = start("import os, time; print(os.getpid(), flush=True); time.sleep(300)")
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 10
    while not gone(child):
        assert time.monotonic() < deadline, "the child outlived runner run"
        time.sleep(0.05)


def test_each_ctrl_c_reaches_the_child_once_and_runner_run_waits_for_it():
    parent = start(CHILD)
    parent.stdout.readline()
    for _ in range(2):
        os.killpg(parent.pid, signal.SIGINT)  # a Ctrl-C at the terminal: the whole group
        time.sleep(0.3)
    out, _ = parent.communicate(timeout=30)
    assert out.splitlines() == ["two interrupts", "child ended 130"]
    assert parent.returncode == 130
