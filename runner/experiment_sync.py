"""A DiLoCo experiment's synchronizer rendered: its command (the one translation of the
`diloco` block into the synchronizer's options, shared with the local run), a CPU Job and
a Service (an internal load balancer admitting only the peers' pod ranges when learners run
in other clusters, after `check_cross_region`), with the experiment and learner labels.
Its curve keys reach the pod as `secretKeyRef`s (docs/diloco.md).
"""

from __future__ import annotations

import shlex
from typing import Any

from catalog import labels
from catalog.errors import InputError
from runner.experiment_render import Part, add_identity, relabel, secret_refs
from runner.experiment_spec import (
    EXPERIMENT_LABEL,
    INTERNAL_LB,
    LEARNER_LABEL,
    SYNC_ROLE,
    Diloco,
    Experiment,
    shared_fields,
    sync_name,
)


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
            **secret_refs(exp, SYNC_ROLE, ("public-key", "secret-key", "allowed")),
        },
    }


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
        raise relabel(err, exp, "synchronizer", {"cpus", "memory", "cluster"}) from None
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
