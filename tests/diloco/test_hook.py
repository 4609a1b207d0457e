"""The training loop's DiLoCo hook (driver.diloco.hook): nothing without REVE_DILOCO_ADDRESS,
bad settings on one line, and a rendered learner's settings syncing a real driver run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from catalog.errors import InputError
from driver.diloco import hook, local, state
from runner import experiment
from tests.diloco.conftest import linear

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "us-docker.pkg.dev/reve-train-ultra/training/trainer@sha256:" + "ab" * 32


def plain_env(exp: experiment.Experiment, name: str) -> dict[str, str]:
    """A rendered learner's REVE_DILOCO_* values (the Secret references left out)."""
    learner = next(ln for ln in exp.learners if ln.name == name)
    return {k: v for k, v in experiment.learner_env(exp, learner).items() if isinstance(v, str)}


def one_learner(sync_every: int = 3) -> experiment.Experiment:
    data = {
        "name": "hooked",
        "namespace": "research",
        "image": IMAGE,
        "train_config": "runs/train/tiny-lm.yaml",
        "diloco": {"sync_every": sync_every, "compression": "fp32", "barrier_timeout_s": 60},
        "synchronizer": {"cluster": "ultra-usc1"},
        "learners": [{"name": "a", "cluster": "ultra-usc1"}],
    }
    return experiment.build_experiment(data, "runs/x.yaml")


def test_without_an_address_the_hook_does_nothing():
    model = linear()
    diloco = hook.attach(model, environ={})
    assert not diloco
    diloco.after_step(0, model)
    diloco.end(model)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"REVE_DILOCO_MODE": "lazy"}, "REVE_DILOCO_MODE: 'lazy': expected one of"),
        ({"REVE_DILOCO_SYNC_EVERY": "ten"}, "REVE_DILOCO_SYNC_EVERY: 'ten' is not int"),
        ({"REVE_DILOCO_KEYS": ""}, "REVE_DILOCO_KEYS or REVE_DILOCO_PUBLIC_KEY"),
    ],
)
def test_bad_settings_are_one_line(env, message, keys_dir):
    base = {**plain_env(one_learner(), "a"), "REVE_DILOCO_KEYS": keys_dir, **env}
    with pytest.raises(InputError) as err:
        hook.check_env(base)
    assert err.value.line().startswith("environment: ") and message in err.value.line()
    assert "\n" not in err.value.line()


def test_the_rendered_settings_make_a_learner_that_syncs(keys_dir, sync_thread):
    sync = sync_thread(compression="fp32", round_timeout_s=5.0, expect=("a",))
    env = {**plain_env(one_learner(2), "a"), "REVE_DILOCO_KEYS": keys_dir}
    env["REVE_DILOCO_ADDRESS"] = sync.address
    model = linear()
    diloco = hook.attach(model, environ=env)
    assert diloco
    for step in range(4):
        with torch.no_grad():
            model.weight.add_(0.1)
        diloco.after_step(step, model)
    diloco.end(model)
    assert diloco.learner.round == 2


def test_driver_refuses_bad_settings_on_one_line(tmp_path):
    env = {**os.environ, "REVE_DILOCO_ADDRESS": "tcp://127.0.0.1:1", "REVE_DILOCO_LEARNER": "a"}
    env["REVE_DILOCO_MODE"] = "lazy"
    args = ["runs/train/tiny-lm.yaml", f"run.output_dir={tmp_path / 'out'}"]
    done = subprocess.run([sys.executable, "-m", "driver.train", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: environment: REVE_DILOCO_MODE: 'lazy': expected one of ('barrier', 'decoupled')"
    ]


@pytest.mark.slow
def test_a_rendered_learner_syncs_a_driver_run(tmp_path):
    """`python -m driver.train` (one worker) with a learner's rendered settings, against a
    synchronizer process: the loop pushes every H steps and rounds merge."""
    from driver.diloco import keys

    keys.generate(tmp_path / "keys", ["a"])
    sync, address = local.start_synchronizer(
        tmp_path, ["--expect", "a", "--compression", "fp32", "--round-timeout", "30"]
    )
    env = {**os.environ, **plain_env(one_learner(3), "a")}
    env |= {"REVE_DILOCO_ADDRESS": address, "REVE_DILOCO_KEYS": str(tmp_path / "keys")}
    out = tmp_path / "out"
    args = ["runs/train/tiny-lm.yaml", "train.steps=7", "optimizer.warmup_steps=2",
            "data.size=1024", "parallelism.workers=1", f"run.output_dir={out}"]  # fmt: skip
    try:
        done = subprocess.run([sys.executable, "-m", "driver.train", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=400)  # fmt: skip
    finally:
        sync.terminate()
        sync.wait(30)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rounds = state.read_rounds(tmp_path / "state")
    assert len(rounds) >= 2 and all(r["contributors"] == ["a"] for r in rounds), rounds
    assert json.loads((out / "summary.json").read_text())["steps"] == 7
