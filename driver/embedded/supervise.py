"""Nothing of a local run outlives its driver, and a terminal's signal reaches the driver
alone.

`supervise(run)`: the run of `python -m driver.train` on an embedded Ray (and so the
embedded Ray it starts) goes in a child process in a session of its own, so that a signal
to the terminal's process group (Ctrl-C, a SIGTERM to the group) reaches the driver alone
and never Ray's daemons or workers, which must live until the final checkpoint is written.
This process stays in the terminal's group, hands every stop signal to the child, and when
the child ends, however it ends, kills whatever is left of its session; if this process is
killed (even SIGKILL), the kernel kills the child (PR_SET_PDEATHSIG), Ray's daemons and
workers follow, and a small reaper process in the session, which sees this process end
through a pipe, kills the rest (Ray's dashboard and runtime-env agents would outlive their
raylet). With `isolate_network`, the child goes in a network namespace of its own first
(driver/embedded/netns.py): nothing of the run listens on the machine's interfaces.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals the supervising process hands to the run."""
PR_SET_PDEATHSIG = 1


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128 + the signal."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def session_members(sid: int) -> list[int]:
    """The live processes of session `sid` (from /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getsid(int(name)) == sid:
                    found.append(int(name))
            except OSError:
                continue
    return found


def kill_session(sid: int) -> int:
    """SIGKILL every process left in session `sid`; how many there were."""
    left = session_members(sid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    return len(left)


def _die_with_parent(parent: int) -> None:
    """In the child: the kernel kills this process when `parent` ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the call
        os._exit(128 + signal.SIGKILL)


def supervise(run: Callable[[], int], isolate_network: bool = False) -> int:
    """`run()` in a child process in its own session; its exit code (128 + N when a
    signal N ended it). Linux only; elsewhere `run()` runs here. Call it from a program's
    entry point only: the child returns `run()`'s code to the caller, which must exit.
    `isolate_network`: the child runs in a network namespace of its own (driver/embedded/netns.py),
    or, where one cannot be made, on the host's network after a one-line warning."""
    if not sys.platform.startswith("linux"):
        return run()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    alive_r, alive_w = os.pipe()  # this process holds the write end until it ends
    # A stop signal between the fork and the forwarding handlers would end this process
    # with its default action: it waits, blocked, until the handlers are in place.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    child = os.fork()
    if child == 0:  # the child runs on, returns the run's code and exits as usual
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(alive_w)
        os.setsid()
        _die_with_parent(parent)
        _start_reaper(alive_r)
        if isolate_network and not _isolated():
            return 1
        return run()
    os.close(alive_r)
    previous = {s: signal.signal(s, lambda signum, _: _forward(child, signum)) for s in FORWARDED}
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    try:
        _, status = os.waitpid(child, 0)  # retried after each forwarded signal (PEP 475)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        kill_session(child)
        os.close(alive_w)
    return exit_code(status)


def _isolated() -> bool:
    """In the child: into a network namespace of its own (a warning when it stays on the
    host's network); False when the namespace was made but could not be set up."""
    from driver.embedded.netns import isolate

    try:
        reason = isolate()
    except OSError as err:
        print(f"error: the run's network namespace: {err}", file=sys.stderr, flush=True)
        return False
    if reason:
        print(f"warning: the run's Ray listens on the host's network: {reason}",
              file=sys.stderr, flush=True)  # fmt: skip
    return True


def _start_reaper(alive_r: int) -> None:
    """In the child: a small process of its session that waits until the supervising
    process is gone (however it ended: the pipe reads end-of-file) and then kills the
    session. Ray's agents (dashboard, runtime-env) outlive their raylet otherwise."""
    if os.fork() != 0:
        os.close(alive_r)
        return
    try:  # pragma: no cover (a forked process; tests/driver/test_cleanup.py runs it)
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_IGN)
        while os.read(alive_r, 1):
            pass
        mine = os.getpid()
        for pid in session_members(os.getsid(0)):
            if pid != mine:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
    finally:
        os._exit(0)


def _forward(child: int, signum: int) -> None:
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass
