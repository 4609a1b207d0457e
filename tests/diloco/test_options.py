"""One `diloco` block, one set of settings: the rendered synchronizer Job and the local run
(`runner run --local` -> its plan -> `driver.diloco.local --plan`) give the synchronizer and
the learners the same values, and a local learner runs its RayJob's driver command."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest

from driver.config.diloco import LearnerConfig
from driver.diloco import local, synchronizer
from runner import experiment as ex
from runner.experiment_local import local_plan
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


def local_run(exp: ex.Experiment) -> tuple[list[str], list[dict]]:
    """(synchronizer options, learner processes) of the local run of `exp`."""
    plan = local_plan(exp, steps=20)
    return ["--keys", "k", "--state", "s", *local.plan_sync_options(plan)], plan["learners"]


@pytest.mark.parametrize("settings", [OUTER, {}], ids=["set", "defaults"])
def test_local_and_rendered_synchronizers_get_the_same_outer_settings(settings):
    exp = experiment(**settings)
    rendered = outer_of(ex.sync_command(exp, "gs://b/s")[3:])
    sync, _ = local_run(exp)
    assert outer_of(sync) == rendered
    here, d = outer_of(sync), exp.diloco
    assert (here.lr, here.momentum, here.nesterov) == (d.outer_lr, d.outer_momentum, d.nesterov)
    assert (here.min_learners, here.round_timeout_s) == (d.min_learners, d.round_timeout_s)
    assert here.compression == d.compression and here.expect == ("us", "eu")


def composed(words: list[str]) -> LearnerConfig:
    """The `diloco` section a driver command composes (`python -m driver.train ...`)."""
    from driver.config.compose import compose

    start = words.index("driver.train") + 1
    return compose(words[start], words[start + 1 :])[0].diloco


def test_local_learners_get_the_rendered_learner_settings(tmp_path):
    exp = experiment(mode="decoupled", merge="replace", fragments=2, **OUTER)
    _, runs = local_run(exp)
    assert [run["name"] for run in runs] == ["us", "eu"]
    for index, (run, learner) in enumerate(zip(runs, exp.learners, strict=True)):
        here = composed(local.plan_learner_command(run, "tcp://127.0.0.1:5", tmp_path))
        rayjob = next(m for m in ex.render_learner(exp, index).manifests if m["kind"] == "RayJob")
        rendered = composed(shlex.split(rayjob["spec"]["entrypoint"]))
        assert rendered.address == "tcp://lm-diloco-sync.research.svc.cluster.local:5555"
        assert rendered.keys is None  # the keys: the Secret's variables, by name
        assert here == replace(rendered, address="tcp://127.0.0.1:5", keys=str(tmp_path.resolve()))
        assert (here.learner, here.index, here.learners) == (learner.name, index, 2)
        assert (here.sync_every, here.mode, here.merge) == (10, "decoupled", "replace")
        assert (here.compression, here.fragments, here.barrier_timeout_s) == ("int8", 2, 33.0)


CLUSTER_ONLY = ("checkpoint.root=", "logging.clickhouse_url=", "logging.store=",
                "logging.otel_endpoint=", "logging.bundle_root=", "shape.",
                "checkpoint.preemption_budget_s=", "diloco.address=")  # fmt: skip
"""The rendered driver's words that name the cluster's services and the shape it was
rendered for (`runner.spec.entrypoint`); the synchronizer's address: the local run adds
its own."""


def test_a_local_learner_runs_its_rayjob_driver_command():
    exp = experiment()
    _, runs = local_run(exp)
    for index, run in enumerate(runs):
        rayjob = next(m for m in ex.render_learner(exp, index).manifests if m["kind"] == "RayJob")
        words = shlex.split(rayjob["spec"]["entrypoint"])
        same = [w for w in words if not w.startswith(CLUSTER_ONLY)]
        assert ["python", *run["command"][1:]] == [
            *same,
            "parallelism.workers=1",
            "train.steps=20",
        ]


def test_the_rendered_job_runs_the_same_command():
    exp = experiment(**OUTER)
    job = next(m for m in ex.render_synchronizer(exp).manifests if m["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    words = shlex.split(" ".join(container.get("command", []) + container.get("args", [])))
    start = words.index("driver.diloco.synchronizer") + 1
    assert outer_of(words[start:]) == outer_of(ex.sync_command(exp, "x")[3:])
