"""The short soak CI runs (docs/soak.md): `scripts/soak --minutes 1 --fault-every 12
--seed 21 --warden --no-baseline`, a run under faults for a minute, real processes
throughout (the driver, its embedded Ray, the training workers, the auxiliary services, the
data pipeline's producers; beside it, Warden's worker on the Temporal dev server and a fake
fleet with faults of its own). It must exit 0 with every check passed. There is no
failure-free run: the throughput ratio is the long soak's figure.

Seed 21 deals a training worker, then the driver, then the Temporal dev server, then an
aux proxy (chaos.Deck: every kind once per round), so the driver is SIGKILLed and the next
launch resumes: every committed step keeps its one row of record because a checkpoint
commits only after its steps' rows are written (docs/checkpoint.md). The later faults come
when the time allows them; tests/soak/test_warden.py kills Warden's worker and server
several times each."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.driver.conftest import ROOT

CHECKS = ("rows", "resumes", "runs", "warden", "orphans", "soak fds", "soak rss")


@pytest.mark.slow
def test_a_short_soak_with_faults_passes_every_check(tmp_path):
    command = [str(ROOT / "scripts/soak"), "--minutes", "1", "--fault-every", "12",
               "--seed", "21", "--warden", "--no-baseline", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=540)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    for name in CHECKS:
        assert re.search(rf"^  {name}: PASS ", said, re.MULTILINE), said
    assert re.search(r"^t=\+ *[\d.]+s fault 1: SIGKILL ", said, re.MULTILINE), said
    assert re.search(r"^t=\+ *[\d.]+s fault \d+: SIGKILL driver ", said, re.MULTILINE), said
    assert "throughput:" not in said  # no failure-free run to compare with
    assert said.rstrip().endswith("soak: PASS"), said
