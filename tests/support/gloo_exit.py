"""Ending a test process that used gloo: at once, without Python's finalization.

A gloo process group runs each collective on a worker thread of its own, which lets go of
the collective (and its tensors) only after the caller has been woken. On a loaded machine
that thread can stay descheduled until the process is already in interpreter finalization;
freeing a tensor that Python made then needs the GIL, CPython 3.11 ends a thread that asks
for the GIL during finalization with `pthread_exit`, and that unwinding through the
collective's destructor calls `std::terminate`. The process, its work done, ends with
SIGABRT ("terminate called without an active exception"; a core dump showed exactly that
stack: docs/ft.md, "A survivor that aborted after its work was done").
`dist.destroy_process_group()` does not prevent it: the worker thread still holds the
collective.

Ray Train's workers never reach finalization (Ray kills them), so only the tests' own
processes (spawned ranks, drills, scripts) end this way, and only once their work is done
and written: an exception still ends them the usual way, with its traceback."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_now(code: int = 0) -> NoReturn:
    """Flush stdout and stderr, then end the process with `code`, skipping finalization."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing left to lose
            pass
    os._exit(code)
