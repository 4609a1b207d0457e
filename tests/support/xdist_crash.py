"""A test process that dies costs its test, never the run, and says why it died.

Under pytest-xdist (`--dist loadfile`: a test file per worker, as ./scripts/test runs) a
worker's crash gets the crashed test reported failed, and the rest of the run goes on to
its end and its summary.

pytest-xdist 3.8.0's scheduler for files (`LoadScopeScheduling`) can hang for good after a
worker dies (a test that ends its own process, the kernel's OOM killer, a SIGKILL):

- `remove_node` queues the dead worker's whole workload again, files it had finished
  included. A finished file goes to a worker as an empty list of tests, which never
  completes, so that worker is never given more work; at the end of the run every worker
  waits for a next test that never comes (pytest-xdist issue 1378; a CI run hung at 99%
  until its time limit).
- the test the worker died in is queued again with its file, though it is already
  reported failed, and may end the replacement worker the same way (pull request 1371).
- a replacement worker given a file of one test waits for a second test before it runs
  the first (a worker runs a test once it knows the next, or its end): nothing ends it
  (issue 1327).

`FileScheduling` queues only the files with tests still to run, without the crashed test,
and gives a worker at least two tests, or its end, whenever it asks for work.

A worker that ends through `os._exit` (a watchdog's or a grace period's end in code under
test, pytest-timeout) says so first on its real stderr, with the stack that called it and
every thread's stack: whatever it printed before went to the test's captured output, which
dies with it, and pytest-timeout's own dump of the stacks goes to a worker's terminal,
which nobody reads (so a test that timed out would name no line it was stuck on). Then it
kills every process below it (a Ray, a synchronizer), which the test's own cleanup, skipped
by `os._exit`, would have ended: left, they loaded the machine for the tests after. And a
test process (worker or not) that crashes in native code prints every thread's stack
there: chDB, which a driver run in process loads, replaces faulthandler's handlers of the
fatal signals with its own, so the session loads it at its start and gives pytest's
faulthandler the signals back.

`tests/conftest.py` registers this module as a plugin; elsewhere,
`-p tests.support.xdist_crash`."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import traceback

import pytest
from xdist.scheduler import LoadFileScheduling


def pytest_configure(config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        say_why_the_worker_exits(config)


def pytest_sessionstart(session) -> None:
    keep_faulthandler(session.config)


def keep_faulthandler(config) -> None:
    """Load chDB now (its fatal-signal handlers replace faulthandler's as it loads) and
    then give pytest's faulthandler, on its own copy of the worker's stderr, the fatal
    signals back."""
    import faulthandler

    from _pytest.faulthandler import fault_handler_stderr_fd_key

    from observability.store import chdb_session_module

    chdb_session_module()
    fd = config.stash.get(fault_handler_stderr_fd_key, None)
    if fd is not None:
        faulthandler.disable()
        faulthandler.enable(file=fd, all_threads=True)


def say_why_the_worker_exits(config) -> None:
    """Make this worker's `os._exit` write a line, its caller's stack and every thread's
    stack to the worker's stderr (not the test's capture), and kill every process below
    the worker, before it exits; forked children exit quietly."""
    worker, real_exit = os.getpid(), os._exit

    def _exit(code: int) -> None:
        if os.getpid() == worker:
            capture = config.pluginmanager.getplugin("capturemanager")
            try:
                if capture is not None:
                    capture.suspend_global_capture(in_=True)
                stack = "".join(traceback.format_stack(limit=12)[:-1])
                os.write(
                    2, f"pytest worker {worker}: os._exit({code}), called from:\n{stack}".encode()
                )
                os.write(2, f"pytest worker {worker}: every thread at the exit:\n".encode())
                faulthandler.dump_traceback(file=2, all_threads=True)
                kill_below(worker)
            except Exception:  # noqa: BLE001, S110 (exiting anyway)
                pass
        real_exit(code)

    os._exit = _exit


def kill_below(pid: int) -> None:
    """SIGKILL every process below `pid`."""
    from tests.soak.procs import descendants, snapshot

    for child in descendants(pid, snapshot()):
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadfile":
        return FileScheduling(config, log)
    return None


def still_to_run(workload: dict[str, dict[str, bool]], crashed: str) -> dict[str, dict[str, bool]]:
    """The files of a dead worker's `workload` ({file: {test: done}}) with a test still to
    run once `crashed` counts as done: the work to queue again."""
    left = {}
    for scope, tests in workload.items():
        tests = {test: done or test == crashed for test, done in tests.items()}
        if not all(tests.values()):
            left[scope] = tests
    return left


def first_not_done(workload: dict[str, dict[str, bool]]) -> str | None:
    """The test a worker died in: its first test not done (a worker runs them in order)."""
    for tests in workload.values():
        for test, done in tests.items():
            if not done:
                return test
    return None


class FileScheduling(LoadFileScheduling):
    """`--dist loadfile` that goes on after a worker's crash (see the module's text)."""

    def remove_node(self, node) -> str | None:
        workload = self.assigned_work.pop(node)
        crashed = first_not_done(workload)
        if crashed is None:  # it had finished its work: nothing crashed
            return None
        self.workqueue.update(still_to_run(workload, crashed))
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        assigned = self.assigned_work[node]
        if self.workqueue and self._pending_of(assigned) <= 2:
            self._assign_work_unit(node)
            while self.workqueue and self._pending_of(assigned) < 2:
                self._assign_work_unit(node)  # a test runs once the worker knows the next
        if not self.workqueue:
            node.shutdown()  # it runs what it holds, the last test included, and ends
