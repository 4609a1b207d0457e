"""DiLoCo experiments: one definition, learners in several clusters and a synchronizer.

An experiment file holds the fields of a run definition shared by every learner (image,
namespace, train_config, env ...), a `diloco` block (how learners sync), a `synchronizer`
block (where it runs) and `learners` (a name, a cluster and any run definition fields of its
own: pods, gpus, accelerator ...):

    from runner.experiment import is_experiment, load_experiment, render_experiment
    manifests = render_experiment(load_experiment("runs/examples/diloco-two-regions.yaml"))
    # {cluster: [manifest, ...]}: each learner's RayJob in its cluster, the synchronizer's
    # Job and Service in its own

Learner `a` of experiment `x` is run `x-a` (a RayJob rendered by `runner.render`, checked
like every run); every object of the experiment also carries the experiment and learner
labels. Curve keys reach pods as `secretKeyRef`s to Secrets `<x>-<learner>-keys` and
`<x>-synchronizer-keys` (created from `python -m driver.diloco.keys DIR --k8s`), never as
values. `local_command(experiment)` is the same experiment as local processes on loopback.

The parts: `experiment_spec` (the file's model, loading, checks, names), `experiment_render`
(the learners' manifests), `experiment_sync` (the synchronizer's), `experiment_local` (the
local run); this module puts the parts together per cluster.
"""

from __future__ import annotations

from runner.experiment_local import local_command, run_local
from runner.experiment_render import (
    Part,
    add_identity,
    learner_data,
    learner_env,
    learner_overrides,
    render_learner,
)
from runner.experiment_spec import (
    EXPERIMENT_LABEL,
    INTERNAL_LB,
    KEY_ENV,
    LEARNER_LABEL,
    SYNC_ROLE,
    Diloco,
    Experiment,
    Learner,
    Synchronizer,
    build_experiment,
    is_experiment,
    is_experiment_file,
    load_experiment,
    secret_name,
    shared_fields,
    sync_address,
    sync_name,
)
from runner.experiment_sync import (
    check_cross_region,
    outer_options,
    render_synchronizer,
    sync_command,
    sync_data,
)

__all__ = [
    "EXPERIMENT_LABEL", "INTERNAL_LB", "KEY_ENV", "LEARNER_LABEL", "SYNC_ROLE", "Diloco",
    "Experiment", "Learner", "Part", "Synchronizer", "add_identity", "build_experiment",
    "by_cluster", "check_cross_region", "cluster_totals", "is_experiment",
    "is_experiment_file", "learner_data", "learner_env", "learner_overrides", "load_experiment",
    "local_command", "outer_options", "render_experiment", "render_learner", "render_parts",
    "render_synchronizer", "run_local", "secret_name", "shared_fields", "sync_address",
    "sync_command", "sync_data", "sync_name",
]  # fmt: skip


def render_parts(exp: Experiment) -> list[Part]:
    """Every learner's part, then the synchronizer's; all validated."""
    learners = [render_learner(exp, i) for i in range(len(exp.learners))]
    return [*learners, render_synchronizer(exp)]


def by_cluster(parts: list[Part]) -> dict[str, list[Part]]:
    """The parts grouped by cluster, in order of first appearance."""
    out: dict[str, list[Part]] = {}
    for part in parts:
        out.setdefault(part.cluster, []).append(part)
    return out


def render_experiment(exp: Experiment) -> dict[str, list[dict]]:
    """Every validated manifest of the experiment, by the cluster it goes to."""
    return {
        cluster: [m for part in parts for m in part.manifests]
        for cluster, parts in by_cluster(render_parts(exp)).items()
    }


def cluster_totals(parts: list[Part]) -> str:
    """One line for an apps/ header: `learner us: 2 pods × ...; synchronizer: 1 pod × ...`."""
    return "; ".join(
        f"{'learner ' if p.owner != SYNC_ROLE else ''}{p.owner}: {p.totals}" for p in parts
    )
