"""Set-up shared by every test.

Under pytest-xdist (`./scripts/test` runs two workers) each worker gets a Ray folder of its
own (RAY_TMPDIR): a Ray process that looks for "the" local Ray with no address (Ray Train's
placement-group cleaner does, through the state API) reads the cluster address that Ray
wrote in that folder, so it finds its own worker's cluster, never the other worker's.

The tests that press Ctrl-C on a child need SIGINT to act there. A shell without job
control starts a background command (`./scripts/test &`) with SIGINT ignored, and every
child inherits that (Python then installs no KeyboardInterrupt handler at all): the test
process restores Python's own handler, so its children start with SIGINT at its default.
Other signals are left as found.

Every process a test starts (drivers, Ray workers, spawned ranks) runs with Python's
faulthandler (PYTHONFAULTHANDLER): a process that ends on a fatal signal in native code
prints every thread's Python stack first (docs/ft.md, "A survivor that aborted...").

A pytest-xdist worker that dies in a test (`--dist loadfile`) costs that test, not the
run: tests/support/xdist_crash.py schedules the rest, where pytest-xdist's own scheduler
can wait for good; a worker's `os._exit` says where it was called from, and a native crash
prints its stacks although chDB has loaded."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

from tests.support import xdist_crash

_OWN_RAY_FOLDER = "REVE_TEST_RAY_TMPDIR"


def pytest_configure(config) -> None:
    if not config.pluginmanager.is_registered(xdist_crash):
        config.pluginmanager.register(xdist_crash, "xdist-crash")
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "RAY_TMPDIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix=f"ray-{worker}-")
        os.environ["RAY_TMPDIR"] = os.environ[_OWN_RAY_FOLDER] = folder


def pytest_unconfigure(config) -> None:
    folder = os.environ.pop(_OWN_RAY_FOLDER, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
