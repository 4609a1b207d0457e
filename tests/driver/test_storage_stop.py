"""Fail fast on storage the run cannot write, and stop within the grace period in every
phase. Real processes: `python -m driver.train` of the tiny LM on its own embedded Ray.

- an unreachable `gs://` root (a server that accepts connections and never answers, and no
  Google credentials) ends the run with one line naming the field, the URI and the reason,
  within `checkpoint.storage_timeout_s`, before Ray starts;
- SIGINT while the storage check waits: the run stops at once, nothing trained;
- SIGINT while the main thread is held in native code during storage set-up (as pyarrow's
  GCS client retrying holds it; `debug.hang_storage_check`): the run ends at the grace
  deadline (`checkpoint.preemption_budget_s` + STOP_MARGIN_S), and at once on a second
  SIGINT;
- SIGINT during a save that outlasts the grace period (`debug.slow_save_s`): the run ends
  at the grace deadline; the uncommitted save is never resumed from.
(SIGINT during the loop: a final checkpoint, tests/driver/test_interrupt.py.)
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from catalog.saving import STOP_MARGIN_S
from driver.checkpoint.layout import MARKER
from tests.driver.conftest import TINY_LM
from tests.driver.test_interrupt import output, start_driver, wait_for_rows

BUDGET_S = 2.0  # checkpoint.preemption_budget_s in these runs: a 12 s grace period


@pytest.fixture
def blackhole():
    """A TCP server that accepts every connection and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def no_google(endpoint: str) -> dict:
    """Environment of a machine whose Google Cloud endpoints never answer: gcsfs's storage
    endpoint and the metadata server (where both clients look for credentials) are
    `endpoint`."""
    host = endpoint.removeprefix("http://")
    return {"STORAGE_EMULATOR_HOST": endpoint, "GCE_METADATA_HOST": host, "GCE_METADATA_IP": host}


def stderr_lines(tmp_path: Path) -> list[str]:
    return [line for line in (tmp_path / "stderr.txt").read_text().splitlines() if line]


def test_an_unreachable_gs_root_fails_within_the_bound_with_one_line(tmp_path, blackhole):
    root = "gs://reve-unreachable-checkpoints"
    proc = start_driver(tmp_path, f"checkpoint.root={root}", "checkpoint.storage_timeout_s=3",
                        env=no_google(blackhole))  # fmt: skip
    try:
        code = proc.wait(timeout=120)  # it hung for 15 minutes and more before
    finally:
        proc.kill()
    lines = stderr_lines(tmp_path)
    assert code == 1, output(tmp_path)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {TINY_LM}: ")
    assert f"checkpoint.root: cannot write {root}/t/r: " in lines[0]
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def wait_for(proc, tmp_path: Path, text: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in output(tmp_path):
        assert proc.poll() is None, output(tmp_path)
        assert time.monotonic() < deadline, output(tmp_path)
        time.sleep(0.1)


def interrupt(proc, ready, times: int = 1, settle_s: float = 3.0) -> int:
    """Once `ready()` has waited for its phase: SIGINT to the driver's process group
    `settle_s` later (`times` times, a second apart); the exit code."""
    try:
        ready()
        time.sleep(settle_s)
        for n in range(times):
            time.sleep(1 if n else 0)
            os.killpg(proc.pid, signal.SIGINT)
        return proc.wait(timeout=120)
    finally:
        proc.kill()


def test_sigint_while_the_storage_check_waits_stops_at_once(tmp_path, blackhole):
    proc = start_driver(tmp_path, "checkpoint.root=gs://reve-unreachable-checkpoints",
                        "checkpoint.storage_timeout_s=300", env=no_google(blackhole))  # fmt: skip
    code = interrupt(proc, lambda: wait_for(proc, tmp_path, "config: "))  # in the 300 s check
    assert code == 130, output(tmp_path)
    assert "stopped by SIGINT during start-up: nothing trained" in output(tmp_path)


GRACE_LINE = f"stopped: did not stop within {BUDGET_S + STOP_MARGIN_S:g} s of SIGINT: ending now"


@pytest.mark.parametrize("again", [False, True])
def test_sigint_while_storage_set_up_holds_the_main_thread(tmp_path, again):
    proc = start_driver(tmp_path, "debug.hang_storage_check=true",
                        f"checkpoint.preemption_budget_s={BUDGET_S}")  # fmt: skip
    # held in native code: no Python handler runs
    code = interrupt(proc, lambda: wait_for(proc, tmp_path, "config: "), 2 if again else 1)
    text = output(tmp_path)
    assert code == 130, text
    assert ("stopped: SIGINT again after SIGINT: ending now" if again else GRACE_LINE) in text


@pytest.mark.slow
def test_sigint_during_a_save_that_outlasts_the_grace_period(tmp_path):
    proc = start_driver(tmp_path, "train.steps=3000", "checkpoint.interval_steps=5",
                        "checkpoint.async_mode=sync", "debug.slow_save_s=600",
                        f"checkpoint.preemption_budget_s={BUDGET_S}")  # fmt: skip
    code = interrupt(proc, lambda: wait_for_rows(proc, tmp_path, 4))  # step 5's save waits
    text = output(tmp_path)
    assert code == 130 and GRACE_LINE in text, text
    step = tmp_path / "ckpt" / "t" / "r" / "step-5"
    assert not (step / MARKER).exists()  # never committed, never resumed from
