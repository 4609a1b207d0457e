"""The check that picked the pinned torchft build: plain torchft (Manager, ProcessGroupGloo,
DistributedDataParallel, Optimizer) in three replica-group processes, one SIGKILLed inside
the gradient allreduce of step 5. torchft 0.2.0 failed it (its DDP comm hook asserted on the
broken allreduce's future, and both survivors died); torchft-nightly 2026.10.26 passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_survivors_of_a_kill_mid_allreduce_train_on(tmp_path):
    from torchft.coordination import LighthouseServer

    lighthouse = LighthouseServer(
        bind="[::]:0",
        min_replicas=2,
        join_timeout_ms=2000,
        quorum_tick_ms=50,
        heartbeat_timeout_ms=1000,
    )
    addr = "http://127.0.0.1:" + lighthouse.address().rsplit(":", 1)[1]
    procs = []
    for i in range(3):
        kill = ["5", "during"] if i == 2 else []
        cmd = [sys.executable, "-m", "tests.ft.probe", addr, str(i), "12", str(tmp_path / f"{i}")]
        log = open(tmp_path / f"{i}.log", "w")  # noqa: SIM115
        env = {**os.environ, "PROBE_GATE": f"{tmp_path / 'gate'}:3"}  # all three join
        procs.append(subprocess.Popen(cmd + kill, stdout=log, stderr=subprocess.STDOUT, env=env))
    try:
        codes = [p.wait(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
        lighthouse.shutdown()
    assert codes[2] == -9
    assert codes[:2] == [0, 0], (tmp_path / "0.log").read_text()[-2000:]
    rows = [[json.loads(x) for x in (tmp_path / f"{i}").read_text().splitlines()] for i in (0, 1)]
    by_step = [{r["step"]: r for r in group} for group in rows]
    assert max(by_step[0]) == max(by_step[1]) == 12
    for step in set(by_step[0]) & set(by_step[1]):
        assert by_step[0][step]["digest"] == by_step[1][step]["digest"]
    assert not any(r["nan"] for group in rows for r in group)
