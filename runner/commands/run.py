"""`runner run --local RUN.yaml`: the run's own entry point on an embedded Ray, here.

Loads the run definition with `runner.spec.load_run` and runs exactly the command its
RayJob would run (`runner.spec.entrypoint(spec, local=True)`: the driver with the run's
committed config, minus the cluster's checkpoint bucket), with this Python, in the folder
the user ran it from: the run's outputs and checkpoints (relative paths: `outputs/...`)
land there, and the same command run there again resumes (the driver's first line says
so). A `cmd` run runs from the repository root. The driver starts the embedded Ray, shows
progress and prints a summary; the run lives and dies with this process
(runner.localchild: a SIGKILL here ends the whole run).

    runner run --local runs/examples/tiny-lm.yaml --steps 50 --set optimizer.lr=1e-3
    runner run --local runs/examples/tiny-lm.yaml --shape 2x2    # the cluster's layout, smaller

With `--shape NODESxGPUS` the command is the RayJob's at that shape: the driver joins a Ray
cluster of NODES nodes started here (driver/embedded/cluster.py), CPU workers standing in for
the GPUs, and composes the same layout a cluster would (FSDP within a node, replicas
across, the services on their own GPUs, the data pipeline).

The driver says where it saved the composed config (`--show-config` prints it; `--dry-run`
prints the command). Exit codes are the driver's: 0 done, 1 the run failed (see its crash
bundle), 2 bad input, 130 stopped by Ctrl-C and 143 by SIGTERM (after a final checkpoint;
run again to resume; a second Ctrl-C stops at once, and the driver still says what was
saved).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from catalog.errors import InputError
from catalog.loader import repo_root
from runner.commands._types import PathArg


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
@click.argument("run_file", type=PathArg(dir_okay=False))
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
    from runner.spec import check_overrides, entrypoint, load_run

    if not local:
        raise InputError("command line", "--local", "required (use runner submit for clusters)")
    if run_experiment(run_file, sets, steps, dry_run):  # a DiLoCo experiment: local processes
        return
    for word in sets:
        if "=" not in word:
            raise InputError("command line", "--set", f"expected KEY=VALUE, got {shown(word)}")
    spec = load_run(run_file)
    extra = [*sets, *([f"train.steps={steps}"] if steps else [])]
    check_overrides(extra, "command line", "--set")
    if extra:
        spec = load_run(run_file, {"train_overrides": [*spec.train_overrides, *extra]})
    here = Path.cwd()
    words = here_relative(entrypoint(spec, local=True, shape=shape), spec, here)
    command = local_command(words)
    if shape:  # the cluster's path: a Ray cluster of the shape's nodes here, the driver joined
        command[1:3] = ["-m", "driver.embedded.cluster"]
    command += ["--show-config"] if show_config else []
    if dry_run:
        click.echo("$ " + " ".join(command), err=True)
        return
    from runner.localchild import run_child

    cwd = repo_root() if spec.cmd else here
    returncode = run_child(command, cwd, local_env(spec.env, dict(os.environ)))
    if returncode:  # the driver's code (1 failed, 2 bad config, 143 stopped), not click's
        raise SystemExit(returncode)


def here_relative(words: list[str], spec, here: Path) -> list[str]:
    """The driver's words with its config file named from `here` (the folder the run runs
    in) rather than from the repository root; a `cmd` run's words as they are."""
    if spec.cmd or not spec.train_config:
        return words
    path = os.path.relpath(repo_root() / spec.train_config, here)
    return [*words[:3], path, *words[4:]] if words[3:4] == [spec.train_config] else words
