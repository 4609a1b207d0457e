"""A DiLoCo experiment rendered: each learner's RayJob (`runner.render`, checked like every
run) with its `REVE_DILOCO_*` settings, and the synchronizer's Job and Service; every object
carries the experiment and learner labels. Curve keys reach pods as `secretKeyRef`s, never as
values. `runner.experiment` is the public face (docs/diloco.md).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from catalog import labels
from catalog.errors import InputError
from runner.experiment_spec import (
    EXPERIMENT_LABEL,
    INTERNAL_LB,
    KEY_ENV,
    LEARNER_LABEL,
    SYNC_ROLE,
    Diloco,
    Experiment,
    Learner,
    secret_name,
    shared_fields,
    sync_address,
    sync_name,
)


def _refs(exp: Experiment, owner: str, keys: tuple[str, ...]) -> dict[str, Any]:
    secret = secret_name(exp, owner)
    return {
        f"{KEY_ENV}{k.upper().replace('-', '_')}": {"secretKeyRef": {"name": secret, "key": k}}
        for k in keys
    }


def learner_env(exp: Experiment, learner: Learner) -> dict[str, Any]:
    """The REVE_DILOCO_* entries of a learner (read by LearnerConfig.from_env)."""
    d = exp.diloco
    env = {
        "ADDRESS": sync_address(exp, learner.cluster),
        "LEARNER": learner.name,
        "SYNC_EVERY": d.sync_every,
        "MODE": d.mode,
        "MERGE": d.merge,
        "COMPRESSION": d.compression,
        "BARRIER_TIMEOUT_S": d.barrier_timeout_s,
        "FRAGMENTS": d.fragments,
        "INDEX": exp.learners.index(learner),  # its data shard of the experiment's learners
        "LEARNERS": len(exp.learners),
    }
    values = {KEY_ENV + k: str(v) for k, v in env.items()}
    return {**values, **_refs(exp, learner.name, ("public-key", "secret-key", "server-key"))}


def learner_data(exp: Experiment, learner: Learner) -> dict[str, Any]:
    """The run definition of one learner: shared fields, its own on top, DiLoCo env added."""
    base, own = shared_fields(exp), dict(learner.model_extra or {})
    data = {
        **base,
        **own,
        "name": f"{exp.name}-{learner.name}",
        "type": "rayjob",
        "cluster": learner.cluster,
    }
    data["train_overrides"] = [*base.get("train_overrides", []), *own.get("train_overrides", [])]
    data["env"] = {**base.get("env", {}), **own.get("env", {}), **learner_env(exp, learner)}
    return data


def outer_options(d: Diloco) -> list[str]:
    """The synchronizer's merge settings as its options: the one translation of the `diloco`
    block, for the rendered Job and for the local run alike."""
    words = [
        "--outer-lr",
        str(d.outer_lr),
        "--outer-momentum",
        str(d.outer_momentum),
        "--round-timeout",
        str(d.round_timeout_s),
        "--min-learners",
        str(d.min_learners),
        "--compression",
        d.compression,
    ]
    return words if d.nesterov else [*words, "--no-nesterov"]


def sync_command(exp: Experiment, state: str) -> list[str]:
    s = exp.synchronizer
    return [
        "python",
        "-m",
        "driver.diloco.synchronizer",
        "--bind",
        f"tcp://*:{s.port}",
        "--keys",
        "env",
        "--state",
        state,
        *outer_options(exp.diloco),
        "--expect",
        ",".join(ln.name for ln in exp.learners),
    ]


def sync_data(exp: Experiment, state: str) -> dict[str, Any]:
    """The synchronizer as a run definition (a CPU Job running sync_command)."""
    base = shared_fields(exp)
    s = exp.synchronizer
    keep = {
        k: base[k]
        for k in (
            "namespace",
            "team",
            "image",
            "allow_mutable_tag",
            "env_file",
            "working_dir",
            "ttl_seconds",
            "priority",
        )
        if k in base
    }
    return {
        **keep,
        "name": sync_name(exp),
        "type": "job",
        "cluster": s.cluster,
        "gpus": 0,
        "cpus": s.cpus,
        "memory": s.memory,
        "cmd": shlex.join(sync_command(exp, state)),
        "env": {
            **base.get("env", {}),
            **_refs(exp, SYNC_ROLE, ("public-key", "secret-key", "allowed")),
        },
    }


def add_identity(node: Any, extra: dict[str, str]) -> Any:
    """Add `extra` labels to every label set that names a run (objects and pod templates)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "labels" and isinstance(value, dict) and labels.RUN in value:
                value.update(extra)
            else:
                add_identity(value, extra)
    elif isinstance(node, list):
        for item in node:
            add_identity(item, extra)
    return node


def _relabel(err: InputError, exp: Experiment, prefix: str, own: set[str]) -> InputError:
    field = err.field or ""
    if field.split(".")[0].split("[")[0] in own:
        return InputError(exp._origin, f"{prefix}.{field}", err.message)
    return err


@dataclass
class Part:
    """One learner's (or the synchronizer's) validated objects and its resource totals."""

    owner: str
    cluster: str
    manifests: list[dict]
    totals: str


def learner_spec(exp: Experiment, index: int, train_overrides: tuple[str, ...] = ()):
    """The RunSpec of learner `index` (`learner_data`, checked), with `train_overrides`
    added after its own: what its RayJob runs and what `runner run --local` runs here."""
    from runner.spec import build_spec

    learner = exp.learners[index]
    data = learner_data(exp, learner)
    data["train_overrides"] = [*data["train_overrides"], *train_overrides]
    try:
        return build_spec(data, exp._origin)
    except InputError as err:
        raise _relabel(err, exp, f"learners[{index}]", set(learner.model_extra or {})) from None


def render_learner(exp: Experiment, index: int) -> Part:
    from runner.render import render

    learner = exp.learners[index]
    own = set(learner.model_extra or {})
    spec = learner_spec(exp, index)
    try:
        rendered = render(spec)
    except InputError as err:
        raise _relabel(err, exp, f"learners[{index}]", own) from None
    identity = {EXPERIMENT_LABEL: exp.name, LEARNER_LABEL: learner.name}
    manifests = add_identity(rendered.manifests, identity)
    return Part(learner.name, learner.cluster, manifests, rendered.plan.totals())


def render_synchronizer(exp: Experiment) -> Part:
    from catalog.loader import load_cluster, load_peer_pod_ranges
    from runner.render import context
    from runner.resolve import resolve
    from runner.spec import build_spec
    from runner.templating import render_template
    from runner.validation.inputs import check_spec, load_env
    from runner.validation.manifests import validate_manifests

    s = exp.synchronizer
    cluster = load_cluster(s.cluster, source=exp._origin, field="synchronizer.cluster")
    team = exp.team or exp.namespace
    check_cross_region(exp, cluster, team)
    state = s.state or f"gs://{cluster.buckets.checkpoints}/{team}/{exp.name}/synchronizer"
    try:
        spec = build_spec(sync_data(exp, state), exp._origin)
        check_spec(spec)
        plan = resolve(spec)
        run = context(plan, load_env(spec))
    except InputError as err:
        raise _relabel(err, exp, "synchronizer", {"cpus", "memory", "cluster"}) from None
    run["worker"]["restart_policy"] = "OnFailure"  # a restart resumes from the saved state
    remote = any(ln.cluster != s.cluster for ln in exp.learners)
    service = {
        "name": sync_name(exp),
        "port": s.port,
        "annotations": INTERNAL_LB if remote else {},
        "type": "LoadBalancer" if remote else "ClusterIP",
        # the load balancer's own firewall admits only the peers' pods (like the policy)
        "source_ranges": sorted(set(load_peer_pod_ranges(cluster).values())) if remote else [],
        "selector": {labels.RUN: sync_name(exp), labels.ROLE: "job"},
    }
    manifests = render_template("diloco-synchronizer", run=run, service=service)
    add_identity(manifests, {EXPERIMENT_LABEL: exp.name, LEARNER_LABEL: SYNC_ROLE})
    validate_manifests(manifests, plan.cluster.kubernetes_version, exp._origin)
    return Part(SYNC_ROLE, s.cluster, manifests, plan.totals())


def check_cross_region(exp: Experiment, cluster, team: str) -> None:
    """Learners in other clusters need the synchronizer's cluster to have opted the team in
    (its catalog's `cross_region`: the quota of internal load balancers and the policy
    that admits the peers' pods on the port); InputError naming the field otherwise."""
    remote = sorted({ln.cluster for ln in exp.learners} - {cluster.name})
    if not remote:
        return
    cross, where = cluster.cross_region, f"clusters/{cluster.name}/cluster.yaml cross_region"
    if cross is None or team not in cross.teams:
        message = f"team {team!r} is not opted in to cross-region experiments in {cluster.name}"
        raise InputError(exp._origin, "synchronizer.cluster", f"{message} ({where}.teams)")
    strangers = [c for c in remote if c not in cross.peers]
    if strangers:
        message = f"{cluster.name} admits learners from {cross.peers} only, not {strangers}"
        raise InputError(exp._origin, "learners", f"{message} ({where}.peers)")
    if exp.synchronizer.port != cross.port:
        message = f"{exp.synchronizer.port}: {cluster.name} opens {cross.port} only"
        raise InputError(exp._origin, "synchronizer.port", f"{message} ({where}.port)")


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
