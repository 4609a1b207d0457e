"""The layout a rendered run trains with, as its pod's driver composes it.

    shape = shape_of(plan)                      # {"nodes", "gpus_per_node", ...} or None
    layout = check_layout(spec, entrypoint(spec, shape=shape))   # the driver's verdict

The runner never imports the driver: `check_layout` runs `python -m driver.config.check`
with the run's entry-point arguments (the same composition and capacity plan the driver
makes at start, without Ray or torch) and returns its JSON; a layout that does not fit the
manifest (more workers than GPUs, a group that straddles nodes, no room beside the
services) is the driver's one line, as an InputError naming the run file. Where the driver
is not installed (a runner-only install) the check is skipped with a warning.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import click

from catalog.errors import InputError
from catalog.loader import repo_root

CHECK_TIMEOUT_S = 60


def shape_of(plan) -> dict | None:
    """The shape a resolved plan renders: pods x GPUs of its accelerator (None: no GPUs)."""
    if plan.accelerator is None or not plan.gpus:
        return None
    return {
        "nodes": plan.spec.pods,
        "gpus_per_node": plan.gpus,
        "accelerator": plan.accelerator.name,
        "cpus_per_gpu": max(1, math.floor(plan.cpus / plan.gpus)),
    }


def check_layout(spec, words: list[str]) -> dict | None:
    """The driver's composed layout for entry point `words` (`python -m driver.train
    CONFIG ...`), or None when the driver is not installed here."""
    command = [sys.executable, "-m", "driver.config.check", *words[3:]]
    try:
        done = subprocess.run(command, cwd=repo_root(), capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise spec.error("train_config", "the driver's layout check did not answer") from None
    if done.returncode == 0:
        return json.loads(done.stdout)
    if "ModuleNotFoundError" in done.stderr:
        click.echo("warning: the driver is not installed: the run's layout is not checked "
                   "(pip install '.[driver]')", err=True)  # fmt: skip
        return None
    line = (done.stderr.strip().splitlines() or ["the layout check failed"])[-1]
    raise InputError(spec.origin, "train_config", line.removeprefix("error: "))
