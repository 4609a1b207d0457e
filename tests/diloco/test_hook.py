"""The training loop's DiLoCo hook (driver.diloco.hook): nothing without `diloco.address`,
bad settings on one line at composition and from `python -m driver.train`, and a rendered
learner's `diloco.*` overrides syncing a learner and a real driver run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from catalog.errors import InputError
from driver.config.compose import compose
from driver.diloco import hook, local, state
from runner import experiment
from tests.diloco.conftest import linear

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "us-docker.pkg.dev/reve-train-ultra/training/trainer@sha256:" + "ab" * 32
CONFIG = "runs/train/tiny-lm.yaml"


def overrides(exp: experiment.Experiment, name: str, address: str, keys: str) -> list[str]:
    """A rendered learner's `diloco.*` overrides, with a local synchronizer and keys folder
    (as driver.diloco.local runs a plan)."""
    learner = next(ln for ln in exp.learners if ln.name == name)
    words = experiment.learner_overrides(exp, learner)
    return [*words, f"diloco.address={address}", f"diloco.keys={keys}"]


def one_learner(sync_every: int = 3) -> experiment.Experiment:
    data = {
        "name": "hooked",
        "namespace": "research",
        "image": IMAGE,
        "train_config": CONFIG,
        "diloco": {"sync_every": sync_every, "compression": "fp32", "barrier_timeout_s": 60},
        "synchronizer": {"cluster": "ultra-usc1"},
        "learners": [{"name": "a", "cluster": "ultra-usc1"}],
    }
    return experiment.build_experiment(data, "runs/x.yaml")


def test_without_an_address_the_hook_does_nothing():
    model = linear()
    diloco = hook.attach(model, compose(CONFIG)[0].diloco)
    assert not diloco
    diloco.after_step(0, model)
    diloco.end(model)


def test_the_settings_are_in_the_composed_config(tmp_path, keys_dir):
    words = overrides(one_learner(), "a", "tcp://127.0.0.1:5555", keys_dir)
    cfg, text = compose(CONFIG, words)
    saved = yaml.safe_load(text)["diloco"]
    assert saved["address"] == "tcp://127.0.0.1:5555" and saved["learner"] == "a"
    assert saved["sync_every"] == 3 and saved["compression"] == "fp32"
    assert saved["keys"] == keys_dir and saved["keys_env_prefix"] == "REVE_DILOCO_"
    assert "KEY" not in text.replace("keys_env_prefix: REVE_DILOCO_", "")  # names, no values
    assert cfg.diloco.curve()  # the keys are found


@pytest.mark.parametrize(
    ("word", "message"),
    [
        ("diloco.mode=lazy", "diloco.mode: 'lazy': expected one of ('barrier', 'decoupled')"),
        ("diloco.sync_every=ten", "diloco.sync_every: Value 'ten' of type 'str' could not"),
        ("diloco.learner=A", "diloco.learner: 'A': expected a DNS label"),
        ("diloco.public_key=abc", "diloco.public_key: unknown key"),
    ],
)
def test_bad_settings_are_one_line(word, message, keys_dir):
    words = [*overrides(one_learner(), "a", "tcp://127.0.0.1:5555", keys_dir), word]
    with pytest.raises(InputError) as err:
        compose(CONFIG, words)
    assert err.value.line().startswith(f"{CONFIG}: {message}"), err.value.line()
    assert "\n" not in err.value.line()


def test_the_rendered_settings_make_a_learner_that_syncs(keys_dir, sync_thread):
    sync = sync_thread(compression="fp32", round_timeout_s=5.0, expect=("a",))
    cfg = compose(CONFIG, overrides(one_learner(2), "a", sync.address, keys_dir))[0]
    model = linear()
    diloco = hook.attach(model, cfg.diloco)
    assert diloco
    for step in range(4):
        with torch.no_grad():
            model.weight.add_(0.1)
        diloco.after_step(step, model)
    diloco.end(model)
    assert diloco.learner.round == 2


def run_driver(args: list[str], env: dict | None = None, timeout: int = 120):
    return subprocess.run([sys.executable, "-m", "driver.train", *args], cwd=ROOT,
                          env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_driver_refuses_bad_settings_and_missing_keys_on_one_line(tmp_path):
    learner = ["diloco.address=tcp://127.0.0.1:1", "diloco.learner=a"]
    out = f"run.output_dir={tmp_path / 'out'}"
    done = run_driver([CONFIG, out, *learner, "diloco.mode=lazy"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {CONFIG}: diloco.mode: 'lazy': expected one of ('barrier', 'decoupled')"
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVE_DILOCO_")}
    done = run_driver([CONFIG, out, *learner], env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: environment: REVE_DILOCO_PUBLIC_KEY: not a Curve key (40 Z85 characters): "
        "set diloco.keys to a keys folder, or the variables named by diloco.keys_env_prefix"
    ]
    done = run_driver([CONFIG, out, *learner, f"diloco.keys={tmp_path / 'none'}"], env)
    assert done.returncode == 2 and "diloco.keys: " in done.stderr, done.stderr


@pytest.mark.slow
def test_a_rendered_learner_syncs_a_driver_run(tmp_path):
    """`python -m driver.train` (one worker) with a learner's rendered settings, against a
    synchronizer process: the loop pushes every H steps and rounds merge."""
    from driver.diloco import keys

    keys.generate(tmp_path / "keys", ["a"])
    sync, address = local.start_synchronizer(
        tmp_path, ["--expect", "a", "--compression", "fp32", "--round-timeout", "30"]
    )
    out = tmp_path / "out"
    args = [CONFIG, "train.steps=7", "optimizer.warmup_steps=2", "data.size=1024",
            "parallelism.workers=1", f"run.output_dir={out}",
            *overrides(one_learner(3), "a", address, str(tmp_path / "keys"))]  # fmt: skip
    try:
        done = run_driver(args, timeout=400)
    finally:
        sync.terminate()
        sync.wait(30)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rounds = state.read_rounds(tmp_path / "state")
    assert len(rounds) >= 2 and all(r["contributors"] == ["a"] for r in rounds), rounds
    assert json.loads((out / "summary.json").read_text())["steps"] == 7
    assert yaml.safe_load((out / "config.yaml").read_text())["diloco"]["learner"] == "a"
