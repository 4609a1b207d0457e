"""A DiLoCo experiment on this machine: `runner run --local EXPERIMENT.yaml` runs
`python -m driver.diloco.local` with every setting of the experiment's `diloco` block.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from catalog.errors import InputError
from runner.experiment_render import outer_options
from runner.experiment_spec import Experiment, build_experiment, is_experiment


def local_command(exp: Experiment, steps: int | None = None) -> list[str]:
    """The experiment on this machine: `python -m driver.diloco.local` with every setting of
    its `diloco` block (the synchronizer's through `outer_options`, the learners' after)."""
    d = exp.diloco
    words = [
        "python",
        "-m",
        "driver.diloco.local",
        "--learners",
        str(len(exp.learners)),
        "--out",
        f"outputs/{exp.team or exp.namespace}/{exp.name}",
        *outer_options(d),
        "--sync-every",
        str(d.sync_every),
        "--mode",
        d.mode,
        "--merge",
        d.merge,
        "--barrier-timeout",
        str(d.barrier_timeout_s),
        "--fragments",
        str(d.fragments),
    ]
    return [*words, "--steps", str(steps)] if steps else words


def run_local(path: str | Path, sets: tuple[str, ...], steps: int | None, dry_run: bool) -> bool:
    """`runner run --local` on an experiment file: run `local_command` from the repository
    root with this interpreter and exit with its code. False (nothing done) for a run file."""
    import os
    import signal
    import subprocess
    import sys

    import click

    from catalog.loader import repo_root
    from runner.spec import read_run

    data, origin = read_run(path)
    if not is_experiment(data):
        return False
    if sets:
        raise InputError("command line", "--set", f"{origin} is an experiment: use --steps only")
    words = local_command(build_experiment(data, origin), steps)
    command = [sys.executable, *words[1:]]
    click.echo("$ " + shlex.join(command), err=True)
    if dry_run:
        return True
    root = str(repo_root())
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    child = subprocess.Popen(command, cwd=root, env=env)
    previous = signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    try:
        try:
            code = child.wait()
        except KeyboardInterrupt:  # the processes got the Ctrl-C too
            code = child.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code:
        raise SystemExit(code)
    return True
