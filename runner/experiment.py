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
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from catalog import labels
from catalog.errors import InputError, from_validation

EXPERIMENT_LABEL, LEARNER_LABEL = labels.EXPERIMENT, labels.LEARNER
SYNC_ROLE = "synchronizer"
KEY_ENV = "REVE_DILOCO_"
INTERNAL_LB = {
    "networking.gke.io/load-balancer-type": "Internal",
    "networking.gke.io/internal-load-balancer-allow-global-access": "true",
}
Quantity = str | int | float


class Diloco(BaseModel):
    """How learners sync (driver.diloco.learner.LearnerConfig, synchronizer.OuterConfig)."""

    model_config = ConfigDict(extra="forbid")
    sync_every: int = Field(default=50, ge=1, description="H: local steps between syncs")
    mode: Literal["barrier", "decoupled"] = "barrier"
    merge: Literal["delta", "replace"] = "delta"
    compression: Literal["bf16", "fp16", "int8", "fp32"] = "bf16"
    outer_lr: float = Field(default=0.7, gt=0, description="outer SGD learning rate")
    outer_momentum: float = Field(default=0.9, ge=0, lt=1, description="outer momentum")
    nesterov: bool = True
    round_timeout_s: float = Field(default=300, gt=0, description="wait after a first push")
    min_learners: int = Field(default=1, ge=1, description="never merge with fewer")
    barrier_timeout_s: float = Field(default=900, gt=0, description="learner's longest wait")
    fragments: int = Field(default=1, ge=1, le=64, description="streaming: model fragments")


class Synchronizer(BaseModel):
    """Where the synchronizer runs and how learners reach it."""

    model_config = ConfigDict(extra="forbid")
    cluster: str
    cpus: Quantity = 4
    memory: Quantity = "16Gi"
    port: int = Field(default=5555, ge=1024, le=65535)
    host: str | None = Field(
        default=None,
        description="address learners in other clusters dial (the internal load balancer's "
        "DNS name or IP); required when any learner runs in another cluster",
    )
    state: str | None = Field(
        default=None,
        description="state URI; default gs://<checkpoint bucket>/<team>/<name>/synchronizer",
    )


class Learner(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(pattern=r"^[a-z]([-a-z0-9]{0,14}[a-z0-9])?$")
    cluster: str


class Experiment(BaseModel):
    """The experiment file: shared run fields (extra keys) plus the three DiLoCo blocks."""

    model_config = ConfigDict(extra="allow")
    name: str
    namespace: str
    team: str | None = None
    diloco: Diloco = Field(default_factory=Diloco)
    synchronizer: Synchronizer
    learners: list[Learner] = Field(min_length=1)
    _origin: str = "command line"


def is_experiment(data: Any) -> bool:
    """Whether parsed YAML is an experiment (it lists learners) rather than a single run."""
    return isinstance(data, dict) and "learners" in data


def is_experiment_file(path: str | Path) -> bool:
    """Whether a run definition file is an experiment (runs/examples/ holds both kinds)."""
    from runner.spec import read_run

    return is_experiment(read_run(path)[0])


def load_experiment(path: str | Path) -> Experiment:
    from runner.spec import read_run

    data, origin = read_run(path)
    return build_experiment(data, origin)


def build_experiment(data: dict[str, Any], origin: str) -> Experiment:
    """Typed experiment; errors name the file and field. Cross-field checks here too."""
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as err:
        raise from_validation(origin, err) from None
    exp._origin = origin
    names = [ln.name for ln in exp.learners]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise InputError(origin, f"learners[{i}].name", f"{name!r} is used twice")
    if exp.diloco.fragments > exp.diloco.sync_every:
        raise InputError(origin, "diloco.fragments", "more than sync_every (H) steps")
    if exp.diloco.min_learners > len(names):
        raise InputError(origin, "diloco.min_learners", f"more than the {len(names)} learners")
    remote = sorted({ln.cluster for ln in exp.learners} - {exp.synchronizer.cluster})
    if remote and not exp.synchronizer.host:
        raise InputError(origin, "synchronizer.host", f"required: learners run in {remote}")
    return exp


def shared_fields(exp: Experiment) -> dict[str, Any]:
    """The run definition fields every learner starts from."""
    return {
        "name": exp.name,
        "namespace": exp.namespace,
        **({"team": exp.team} if exp.team else {}),
        **(exp.model_extra or {}),
    }


def secret_name(exp: Experiment, owner: str) -> str:
    """The Secret holding `owner`'s Curve keys (`synchronizer` or a learner name)."""
    return f"{exp.name}-{owner}-keys"


def sync_name(exp: Experiment) -> str:
    return f"{exp.name}-sync"


def sync_address(exp: Experiment, learner_cluster: str) -> str:
    s = exp.synchronizer
    local = f"{sync_name(exp)}.{exp.namespace}.svc.cluster.local"
    return f"tcp://{local if learner_cluster == s.cluster else s.host}:{s.port}"


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


def render_learner(exp: Experiment, index: int) -> Part:
    from runner.render import render
    from runner.spec import build_spec

    learner = exp.learners[index]
    own = set(learner.model_extra or {})
    try:
        rendered = render(build_spec(learner_data(exp, learner), exp._origin))
    except InputError as err:
        raise _relabel(err, exp, f"learners[{index}]", own) from None
    identity = {EXPERIMENT_LABEL: exp.name, LEARNER_LABEL: learner.name}
    manifests = add_identity(rendered.manifests, identity)
    return Part(learner.name, learner.cluster, manifests, rendered.plan.totals())


def render_synchronizer(exp: Experiment) -> Part:
    from catalog.loader import load_cluster
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
