"""The process of a local run, started by `runner run --local`: it lives and dies with us.

    code = run_child([sys.executable, "-m", "driver.train", ...], cwd, env)

- SIGKILL (or any death) of `runner run` kills the child at once (Linux: the child's
  parent-death signal), and the driver's own supervision ends the rest of the run
  (driver/embedded/supervise.py: its session, Ray included);
- a SIGTERM to `runner run` is handed to the child (a preemption notice: it saves a final
  checkpoint and exits 143);
- Ctrl-C reaches the child through the terminal's process group, once per press; `runner
  run` itself only waits, so a second press reaches the child as a second signal (stop at
  once) and `runner run` still exits with the child's code after the child's last words.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has the kernel SIGKILL the child when this process ends (None
    where there is no such thing)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def set_death_signal() -> None:  # in the child, between fork and exec
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # we died before the call
            os._exit(128 + signal.SIGKILL)

    return set_death_signal


def run_child(command: list[str], cwd: str | Path, env: dict[str, str]) -> int:
    """Run `command` in `cwd` as the module says; its exit code (128 + N for signal N)."""
    child = subprocess.Popen(command, cwd=cwd, env=env, preexec_fn=die_with_parent())
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM)),
        signal.SIGINT: signal.signal(signal.SIGINT, lambda *_: None),  # the child has it too
    }
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code
