"""A DiLoCo experiment on this machine: `runner run --local EXPERIMENT.yaml`.

Each learner runs what its RayJob runs, the driver with its composed run config
(`python -m driver.train CONFIG run.name=<name>-<learner> ... diloco.learner=<learner>
...`, from `learner_spec`, the same run definition `runner render` renders), with one
training worker (`parallelism.workers=1`: two embedded Rays fit a small machine) and
`--steps` as `train.steps`; the cluster's synchronizer address is left out. The
synchronizer gets the experiment's outer settings (`outer_options`, as its rendered Job).
Both go into a plan file, `outputs/<team>/<name>/plan.json`, which
`python -m driver.diloco.local --plan` runs on loopback with keys it generates, adding
`diloco.address=` (its synchronizer) and `diloco.keys=` (the keys folder) to each
learner's command (docs/diloco.md, "Run it locally").
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from catalog.errors import InputError
from runner.experiment_render import learner_spec
from runner.experiment_spec import DRIVER_SECTION, Experiment, build_experiment, is_experiment
from runner.experiment_sync import outer_options

LOCAL_WORKERS = 1
"""Training workers of each local learner."""


def local_out(exp: Experiment) -> str:
    """Where the local run keeps its plan, keys, synchronizer state and log."""
    return f"outputs/{exp.team or exp.namespace}/{exp.name}"


ADDRESS = f"{DRIVER_SECTION}.address="
"""The rendered learner's synchronizer address (a cluster's): `driver.diloco.local` gives
each local learner its loopback synchronizer's instead."""


def plain_env(env: dict[str, Any]) -> dict[str, str]:
    """A learner's plain environment values (Secret references stay in the cluster)."""
    return {
        key: str(value) for key, value in env.items() if isinstance(value, str | int | float | bool)
    }


def learner_runs(exp: Experiment, steps: int | None = None) -> list[dict[str, Any]]:
    """Each learner's local process: its name, driver command and plain environment."""
    from runner.commands.run import local_command as with_this_python
    from runner.spec import entrypoint

    extra = (f"parallelism.workers={LOCAL_WORKERS}", *([f"train.steps={steps}"] if steps else []))
    runs = []
    for index, learner in enumerate(exp.learners):
        spec = learner_spec(exp, index, extra)
        words = [w for w in entrypoint(spec, local=True) if not w.startswith(ADDRESS)]
        runs.append({"name": learner.name, "command": with_this_python(words),
                     "env": plain_env(spec.env)})  # fmt: skip
    return runs


def local_plan(exp: Experiment, steps: int | None = None) -> dict[str, Any]:
    """What `python -m driver.diloco.local --plan` runs: the synchronizer's options and
    every learner's process."""
    return {
        "out": local_out(exp),
        "synchronizer": outer_options(exp.diloco),
        "learners": learner_runs(exp, steps),
    }


def local_command(exp: Experiment) -> list[str]:
    """The experiment on this machine: `driver.diloco.local` running its plan file."""
    return ["python", "-m", "driver.diloco.local", "--plan", f"{local_out(exp)}/plan.json"]


def shown_learner(run: dict[str, Any]) -> str:
    """One learner of the plan as a shell line (its environment, then its command)."""
    settings = [f"{key}={value}" for key, value in sorted(run["env"].items())]
    return f"  learner {run['name']}: {shlex.join([*settings, *run['command']])}"


def run_local(path: str | Path, sets: tuple[str, ...], steps: int | None, dry_run: bool) -> bool:
    """`runner run --local` on an experiment file: write its plan, run it from the
    repository root with this interpreter and exit with its code. False (nothing done)
    for a run file."""
    import click

    from catalog.loader import repo_root
    from runner.spec import read_run

    data, origin = read_run(path)
    if not is_experiment(data):
        return False
    if sets:
        raise InputError("command line", "--set", f"{origin} is an experiment: use --steps only")
    exp = build_experiment(data, origin)
    plan = local_plan(exp, steps)
    command = [sys.executable, *local_command(exp)[1:]]
    click.echo("$ " + shlex.join(command), err=True)
    expect = ["--expect", ",".join(run["name"] for run in plan["learners"])]
    click.echo(f"  synchronizer: {shlex.join([*plan['synchronizer'], *expect])}", err=True)
    for run in plan["learners"]:
        click.echo(shown_learner(run), err=True)
    if dry_run:
        return True
    root = repo_root()
    (root / plan["out"]).mkdir(parents=True, exist_ok=True)
    (root / plan["out"] / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    code = _run_here(command, root)
    if code:
        raise SystemExit(code)
    return True


def _run_here(command: list[str], root: Path) -> int:
    """Run `command` in `root` with the repository on PYTHONPATH (runner.localchild: it
    lives and dies with us); its exit code."""
    import os

    from runner.localchild import run_child

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    return run_child(command, root, env)
