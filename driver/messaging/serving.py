"""Serving loops that no input can end: a loop that raises is reported and run again.

Every serving loop (the auxiliary proxy and worker, the run's channel, the DiLoCo
synchronizer) turns what a peer sends into a counted refusal where it reads it; `supervise`
is the net under that: if the loop raises anyway (a bug, an error nobody foresaw), the error
is logged with its traceback, counted by `report`, and the loop runs again on the same
sockets after a short pause (doubling while it keeps failing at once, up to `MAX_PAUSE_S`),
until `alive()` turns false. The thread itself never ends on an error.

    def _run(self):                                   # the serving thread's target
        try:
            supervise(self._serve, self.running.is_set, self._restarted, "aux-proxy")
        finally:
            close_sockets()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("driver.messaging")
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 2.0
STEADY_S = 10.0
"""A loop that ran this long before it failed starts again after the first pause."""


def supervise(
    loop: Callable[[], None],
    alive: Callable[[], bool],
    report: Callable[[BaseException], None],
    name: str,
) -> None:
    """Run `loop()` until it returns or `alive()` is false; an error is reported and the loop
    run again (in a serving thread SystemExit too: it is not for a message to end the
    thread). Ctrl-C, and SystemExit in the main thread, end it as they would any program."""
    pause = FIRST_PAUSE_S
    while alive():
        started = time.monotonic()
        try:
            loop()
            return
        except BaseException as err:  # noqa: BLE001 (the loop must come back)
            if _ends_the_program(err):
                raise
            if not alive():
                return
            log.error("%s: the serving loop failed and starts again", name, exc_info=err)
            try:
                report(err)
            except Exception:  # noqa: BLE001 (a count that fails must not end the thread)
                pass
        if time.monotonic() - started > STEADY_S:
            pause = FIRST_PAUSE_S
        time.sleep(pause)
        pause = min(2 * pause, MAX_PAUSE_S)


def _ends_the_program(err: BaseException) -> bool:
    if isinstance(err, KeyboardInterrupt | GeneratorExit):
        return True
    return isinstance(err, SystemExit) and threading.current_thread() is threading.main_thread()
