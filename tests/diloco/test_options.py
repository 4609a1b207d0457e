"""One `diloco` block, one set of settings: the rendered synchronizer Job and the local run
(`runner run --local` -> `driver.diloco.local`) give the synchronizer and the learners the
same values."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest

from driver.diloco import local, synchronizer, trainer
from runner import experiment as ex
from tests.runner.conftest import IMAGE

OUTER = {
    "outer_lr": 0.35,
    "outer_momentum": 0.6,
    "nesterov": False,
    "min_learners": 2,
    "round_timeout_s": 42.0,
    "compression": "int8",
}


def experiment(**diloco) -> ex.Experiment:
    data = {
        "name": "lm-diloco",
        "namespace": "research",
        "image": IMAGE,
        "train_config": "runs/train/tiny-lm.yaml",
        "diloco": {"sync_every": 10, "barrier_timeout_s": 33.0, **diloco},
        "synchronizer": {"cluster": "ultra-usc1"},
        "learners": [
            {"name": "us", "cluster": "ultra-usc1"},
            {"name": "eu", "cluster": "ultra-usc1"},
        ],
    }
    return ex.build_experiment(data, "runs/x.yaml")


def outer_of(sync_words: list[str]) -> synchronizer.OuterConfig:
    """The synchronizer's OuterConfig for its command line (after the module name)."""
    return synchronizer.outer_config(synchronizer.parse_args(sync_words))


def local_run(exp: ex.Experiment) -> tuple[list[str], list[str]]:
    """(synchronizer options, learner options) `driver.diloco.local` derives."""
    args, rest = local.parse_args(ex.local_command(exp, steps=20)[3:])
    names = local.learner_names(args.learners)
    sync = ["--keys", "k", "--state", "s", *local.sync_options(args), "--expect", ",".join(names)]
    return sync, rest


@pytest.mark.parametrize("settings", [OUTER, {}], ids=["set", "defaults"])
def test_local_and_rendered_synchronizers_get_the_same_outer_settings(settings):
    exp = experiment(**settings)
    rendered = outer_of(ex.sync_command(exp, "gs://b/s")[3:])
    sync, _ = local_run(exp)
    here = outer_of(sync)
    assert replace(here, expect=()) == replace(rendered, expect=())
    d = exp.diloco
    assert (here.lr, here.momentum, here.nesterov) == (d.outer_lr, d.outer_momentum, d.nesterov)
    assert (here.min_learners, here.round_timeout_s) == (d.min_learners, d.round_timeout_s)
    assert here.compression == d.compression and here.expect == ("learner-a", "learner-b")


def test_local_learners_get_the_learner_settings():
    exp = experiment(mode="decoupled", merge="replace", fragments=2, **OUTER)
    _, rest = local_run(exp)
    args = trainer.parse_args(["--out", "x", *rest])
    assert (args.sync_every, args.mode, args.merge) == (10, "decoupled", "replace")
    assert (args.compression, args.fragments, args.barrier_timeout) == ("int8", 2, 33.0)
    assert args.steps == 20


def test_the_rendered_job_runs_the_same_command():
    exp = experiment(**OUTER)
    job = next(m for m in ex.render_synchronizer(exp).manifests if m["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    words = shlex.split(" ".join(container.get("command", []) + container.get("args", [])))
    start = words.index("driver.diloco.synchronizer") + 1
    assert outer_of(words[start:]) == outer_of(ex.sync_command(exp, "x")[3:])
