"""`runner run --local`: the run definition's own entry point, run here; no torch/ray at
CLI start-up."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runner.cli import main
from runner.commands.run import local_command, local_env
from tests.driver.conftest import ROOT

RUN = """name: cli-e2e
type: rayjob
cluster: ultra-usc1
namespace: research
pods: 1
gpus: 8
accelerator: H200
image: us-docker.pkg.dev/x/training/trainer@sha256:{digest}
train_config: runs/train/tiny-lm.yaml
train_overrides: [optimizer.warmup_steps=3]
""".replace("{digest}", "4f5c0e7d1a9b3c2e8f6a7b0d9c1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e")


@pytest.fixture
def run_file(tmp_path):
    path = tmp_path / "cli-e2e.yaml"
    path.write_text(RUN)
    return path


def test_cli_start_up_imports_neither_torch_nor_ray():
    code = (
        "import sys; from runner.cli import cli; import runner.commands.run; "
        "print([m for m in sys.modules if m.split('.')[0] in ('torch', 'ray', 'hydra')])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "[]", done.stderr


def test_dry_run_prints_the_rayjob_entrypoint(run_file, capsys):
    with pytest.raises(SystemExit) as done:
        main(
            ["run", "--local", str(run_file), "--steps", "5", "--set", "train.seed=3", "--dry-run"]
        )
    assert done.value.code == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"$ {sys.executable} -m driver.train runs/train/tiny-lm.yaml")
    assert line.endswith(
        "run.name=cli-e2e run.team=research run.cluster=ultra-usc1 "
        "optimizer.warmup_steps=3 train.seed=3 train.steps=5"
    )
    assert "checkpoint.root" not in line  # local runs keep the local checkpoint root


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "{file}"], "--local: required"),
        (["run", "--local", "{file}", "--set", "novalue"], "--set: expected KEY=VALUE"),
        (["run", "--local", "missing.yaml"], "missing.yaml"),
    ],
)
def test_bad_input_exits_2(run_file, capsys, args, message):
    with pytest.raises(SystemExit) as done:
        main([a.replace("{file}", str(run_file)) for a in args])
    assert done.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_driver_key_exits_2_through_the_runner(run_file, capsys):
    with pytest.raises(SystemExit) as done:
        main(["run", "--local", str(run_file), "--set", "optim.lr=1"])
    assert done.value.code == 2


def test_local_command_and_env():
    assert local_command(["python", "-m", "x"]) == [sys.executable, "-m", "x"]
    assert local_command(["bash", "-c", "true"]) == ["bash", "-c", "true"]
    env = local_env({"A": "1", "N": 2, "S": {"secretKeyRef": {"name": "x"}}}, {"PATH": "/bin"})
    assert env["A"] == "1" and env["N"] == "2" and "S" not in env
    assert env["PYTHONPATH"].split(":")[0] == str(ROOT)


@pytest.mark.slow
def test_runner_run_local_end_to_end(run_file, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", "--local", str(run_file), "--steps", "20",
         "--set", f"run.output_dir={out}"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "done: 20 steps on 2 workers" in done.stdout
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and rows[-1]["loss"] < rows[0]["loss"]
