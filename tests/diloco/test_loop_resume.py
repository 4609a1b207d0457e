"""The driver's loop keeps a learner's sync state in its checkpoints: a run resumed from
its checkpoint continues the learner's rounds instead of starting its schedule again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from driver.diloco import keys, local, state
from tests.diloco.test_hook import ROOT, one_learner, overrides


@pytest.mark.slow
def test_a_driver_learner_resumes_its_rounds(tmp_path):
    keys.generate(tmp_path / "keys", ["a"])
    sync, address = local.start_synchronizer(
        tmp_path, ["--expect", "a", "--compression", "fp32", "--round-timeout", "30"]
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    out = tmp_path / "out"
    args = ["runs/train/tiny-lm.yaml", "optimizer.warmup_steps=2", "data.size=1024",
            "parallelism.workers=1", f"run.output_dir={out}",
            f"checkpoint.root={tmp_path / 'ckpt'}", "checkpoint.interval_steps=4",
            *overrides(one_learner(3), "a", address, str(tmp_path / "keys"))]  # fmt: skip
    try:
        for steps in (5, 9):
            done = subprocess.run([sys.executable, "-m", "driver.train", *args,
                                   f"train.steps={steps}"], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=400)  # fmt: skip
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        sync.terminate()
        sync.wait(30)
    rounds = state.read_rounds(tmp_path / "state")
    assert [r["round"] for r in rounds] == [1, 2, 3], rounds
    assert all(r["contributors"] == ["a"] and not r["late"] for r in rounds)
    assert json.loads((out / "summary.json").read_text())["steps"] == 9
