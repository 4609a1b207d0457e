"""`runner run --local RUN.yaml`: the run's own entry point on an embedded Ray, here.

Loads the run definition with `runner.spec.load_run` and runs exactly the command its
RayJob would run (`runner.spec.entrypoint(spec, local=True)`: the driver with the run's
committed config, minus the cluster's checkpoint bucket), from the repository root, with
this Python. The driver starts the embedded Ray, shows progress and prints a summary.

    runner run --local runs/examples/tiny-lm.yaml --steps 50 --set optimizer.lr=1e-3
    runner run --local runs/examples/tiny-lm.yaml --shape 2x2    # the cluster's layout, smaller

With `--shape NODESxGPUS` the command is the RayJob's at that shape: the driver joins a Ray
cluster of NODES nodes started here (driver/embedded/cluster.py), CPU workers standing in for
the GPUs, and composes the same layout a cluster would (FSDP within a node, replicas
across, the services on their own GPUs, the data pipeline).

The driver says where it saved the composed config (`--show-config` prints it).
Exit codes are the driver's: 0 done, 1 the run failed (see its crash bundle), 2 bad input,
130 stopped by Ctrl-C and 143 by SIGTERM (after a final checkpoint; run again to resume).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import click

from catalog.errors import InputError
from catalog.loader import repo_root


def parse_shape(value: str | None) -> dict | None:
    """`2x2` -> the driver's shape of 2 nodes x 2 stand-in GPUs (CPU workers, 1 CPU each)."""
    if value is None:
        return None
    nodes, _, gpus = value.lower().partition("x")
    if not (nodes.isdigit() and gpus.isdigit() and int(nodes) >= 1 and int(gpus) >= 1):
        raise InputError("command line", "--shape", f"expected NODESxGPUS like 2x2, got {value!r}")
    return {"nodes": int(nodes), "gpus_per_node": int(gpus), "accelerator": "cpu",
            "cpus_per_gpu": 1}  # fmt: skip


def local_command(words: list[str]) -> list[str]:
    """The entry point with `python` replaced by this interpreter (the project's venv)."""
    if words and words[0] in ("python", "python3"):
        return [sys.executable, *words[1:]]
    return list(words)


def local_env(spec_env: dict, base: dict[str, str]) -> dict[str, str]:
    """The environment of the local run: ours plus the run's plain `env` values
    (secret references stay in the cluster)."""
    env = dict(base)
    for key, value in spec_env.items():
        if isinstance(value, str | int | float | bool):
            env[key] = str(value)
    root = str(repo_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


@click.command("run")
@click.argument("run_file", type=click.Path(dir_okay=False))
@click.option("--local", "local", is_flag=True, help="Run on an embedded Ray on this machine.")
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE",
    help="Driver config override, after the run's train_overrides (repeatable).",
)  # fmt: skip
@click.option("--steps", type=click.IntRange(min=1), help="Shortcut for --set train.steps=N.")
@click.option(
    "--shape", metavar="NODESxGPUS", callback=lambda ctx, param, value: parse_shape(value),
    help="Run the rendered RayJob's configuration at this scaled-down shape (e.g. 2x2): a "
    "Ray cluster of NODES nodes here, CPU workers standing in for GPUS GPUs each.",
)  # fmt: skip
@click.option("--show-config", is_flag=True, help="Print the composed driver config at start.")
@click.option("--dry-run", is_flag=True, help="Print the command and exit.")
def run(run_file, local, sets, steps, shape, show_config, dry_run) -> None:
    """Run a run definition locally: the same driver and config its RayJob runs."""
    from runner.experiment import run_local as run_experiment
    from runner.runfile import shown
    from runner.spec import entrypoint, load_run

    if not local:
        raise InputError("command line", "--local", "required (use runner submit for clusters)")
    if run_experiment(run_file, sets, steps, dry_run):  # a DiLoCo experiment: local processes
        return
    for word in sets:
        if "=" not in word:
            raise InputError("command line", "--set", f"expected KEY=VALUE, got {shown(word)}")
    spec = load_run(run_file)
    extra = [*sets, *([f"train.steps={steps}"] if steps else [])]
    if extra:
        spec = load_run(run_file, {"train_overrides": [*spec.train_overrides, *extra]})
    command = local_command(entrypoint(spec, local=True, shape=shape))
    if shape:  # the cluster's path: a Ray cluster of the shape's nodes here, the driver joined
        command[1:3] = ["-m", "driver.embedded.cluster"]
    command += ["--show-config"] if show_config else []
    click.echo("$ " + " ".join(command), err=True)
    if dry_run:
        return
    child = subprocess.Popen(command, cwd=repo_root(), env=local_env(spec.env, dict(os.environ)))
    # A SIGTERM to `runner run` (a preemption notice) goes to the driver, which saves a final
    # checkpoint when it fits and exits 143; Ctrl-C reaches it through the process group
    # (130), and only it: its embedded Ray runs in a session of its own.
    previous = signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    try:
        try:
            returncode = child.wait()
        except KeyboardInterrupt:  # the driver got the Ctrl-C too; let it finish its exit
            returncode = child.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if returncode:  # the driver's code (1 failed, 2 bad config, 143 stopped), not click's
        raise SystemExit(returncode)
