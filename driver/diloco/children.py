"""The local run's processes (`driver.diloco.local`): each one's lines shown with its name
in front, and one way to stop them all.

    procs = Children()
    procs.start("us", ["python", "-m", "driver.train", ...], env)
    codes = procs.wait()     # {name: exit code}; Ctrl-C or SIGTERM stops every one

Every process dies with this one (`PR_SET_PDEATHSIG`: SIGTERM, so a driver still saves
its final checkpoint), so a killed local run leaves none behind. A Ctrl-C reaches the
learners through the terminal's process group (a driver then asks its workers for a
final checkpoint and stops); a SIGTERM to this process is handed to each. `wait` then
gives them `grace_s` to end, sends SIGINT again to those left (a learner can wait at a
barrier for one that already stopped; a second Ctrl-C stops a driver at once), and kills
what is left 15 s later.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
import threading
import time
from typing import IO

PR_SET_PDEATHSIG = 1
STOPPED = 130
"""The local run's exit code after a Ctrl-C or a SIGTERM."""


_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in a forked child


def die_with_parent() -> None:
    """In a child, before exec: the kernel sends it SIGTERM when its parent ends."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def echo(stream: IO[str], prefix: str, lock: threading.Lock, log: IO[str] | None = None) -> None:
    """Copy `stream`'s lines to stdout with `prefix` in front (and whole to `log`)."""
    for line in stream:
        if not line.strip():  # a progress bar's first refresh
            continue
        if log is not None:
            log.write(line)
            log.flush()
        with lock:
            sys.stdout.write(f"{prefix}{line}" if line.endswith("\n") else f"{prefix}{line}\n")
            sys.stdout.flush()


class Children:
    """Named child processes whose output is shown prefixed `[name] `."""

    def __init__(self, grace_s: float = 30.0):
        self.procs: dict[str, subprocess.Popen] = {}
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.grace_s = grace_s
        self.stopped = 0

    def start(self, name: str, command: list[str], env: dict[str, str], log=None, **kw):
        """Start `command`; its stdout and stderr are shown as `[name] ` lines."""
        proc = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", preexec_fn=die_with_parent, **kw,
        )  # fmt: skip
        thread = threading.Thread(target=echo, args=(proc.stdout, f"[{name}] ", self.lock, log))
        thread.start()
        self.procs[name], self.threads = proc, [*self.threads, thread]
        return proc

    def say(self, line: str) -> None:
        with self.lock:
            print(line, flush=True)

    def wait(self, names: list[str]) -> dict[str, int]:
        """Wait for the processes `names`; their exit codes. After a Ctrl-C or a SIGTERM
        (handed to each), `end` stops them; `stopped` is then 130 or 143."""
        previous = signal.signal(signal.SIGTERM, self._terminated)
        try:
            try:
                return {name: self.procs[name].wait() for name in names}
            except KeyboardInterrupt:  # the learners got the Ctrl-C too
                self.stopped = self.stopped or STOPPED
                return self.end(names, self.grace_s)
        except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
            return self.end(names, 0)
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _terminated(self, *_) -> None:
        self.stopped = 128 + signal.SIGTERM
        self.signal(signal.SIGTERM)
        raise KeyboardInterrupt

    def signal(self, signum: int, names: list[str] | None = None) -> None:
        """Send `signum` to the processes `names` (all) still running."""
        for name in self.procs if names is None else names:
            if self.procs[name].poll() is None:
                self.procs[name].send_signal(signum)

    def end(self, names: list[str], grace_s: float, again_s: float = 15.0) -> dict[str, int]:
        """Exit codes of `names` once they end: after `grace_s`, those still running (a
        learner waiting at a barrier for one that stopped) get SIGINT again (a driver then
        stops at once), and after `again_s` more they are killed."""
        for wait_s in (grace_s, again_s):
            deadline = time.monotonic() + wait_s
            for name in names:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.procs[name].wait(max(0.0, deadline - time.monotonic()))
            running = [name for name in names if self.procs[name].poll() is None]
            if not running:
                break
            self.say(f"still running after Ctrl-C: {', '.join(running)}; stopping at once")
            self.signal(signal.SIGINT, running)
        for name in names:
            if self.procs[name].poll() is None:
                self.procs[name].kill()
        return {name: self.procs[name].wait() for name in names}

    def close(self, name: str, timeout_s: float = 30.0) -> None:
        """Stop process `name` (SIGTERM, then SIGKILL after `timeout_s`)."""
        proc = self.procs[name]
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def join(self) -> None:
        """Wait until every process's last line is shown."""
        for thread in self.threads:
            thread.join(10)
