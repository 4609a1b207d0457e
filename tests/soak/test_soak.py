"""The short soak CI runs (docs/soak.md): `scripts/soak --minutes 1.5 --fault-every 20
--seed 21 --warden`, a failure-free run and a run under faults of 1.5 minutes each, real
processes throughout (the driver, its embedded Ray, the training workers, the auxiliary
services, the data pipeline's producers; beside the faulted run, Warden's worker on the
Temporal dev server and a fake fleet with faults of its own). It must exit 0 with every
check passed; the throughput ratio is printed, never asserted (machines are noisy).

Seed 21 deals a training worker, then the driver, then the Temporal dev server (chaos.Deck:
every kind once per round), so the driver is SIGKILLed and the next launch resumes: every
committed step keeps its one row of record because a checkpoint commits only after its
steps' rows are written (docs/checkpoint.md). A third fault, when the time allows one,
kills the Temporal server; tests/soak/test_warden.py kills Warden's worker and server
several times each."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.driver.conftest import ROOT

CHECKS = ("rows", "resumes", "runs", "warden", "orphans", "soak fds", "soak rss")


@pytest.mark.slow
def test_a_short_soak_with_faults_passes_every_check(tmp_path):
    command = [str(ROOT / "scripts/soak"), "--minutes", "1.5", "--fault-every", "20",
               "--seed", "21", "--warden", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=540)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    for name in CHECKS:
        assert re.search(rf"^  {name}: PASS ", said, re.MULTILINE), said
    assert re.search(r"^t=\+ *[\d.]+s fault 1: SIGKILL ", said, re.MULTILINE), said
    assert re.search(r"^t=\+ *[\d.]+s fault \d+: SIGKILL driver ", said, re.MULTILINE), said
    assert re.search(r"^  throughput: \d+\.\d\d of the failure-free run", said, re.MULTILINE)
    assert said.rstrip().endswith("soak: PASS"), said
