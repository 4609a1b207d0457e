"""Render a run: check the spec, resolve it against the catalogs, fill the template, validate.

    from runner.render import render_run
    manifests = render_run(load_run("runs/examples/tiny-lm.yaml"))

`render(spec)` also returns the resolved `Plan` (for job totals) and, for a run that starts the
driver, the layout the driver composes for the rendered shape (runner.layout: checked by the driver
itself; a layout that does not fit the manifest is refused here); `render_run` is the contract
other parts call. Every manifest returned has passed `runner.validation`.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from catalog import labels
from runner import keepnodes
from runner.gpupod import gpu_settings
from runner.layout import check_layout, shape_of
from runner.podcontext import NOBODY, pod_context
from runner.resolve import Plan, resolve
from runner.sizing import CPU_ONLY_SHM
from runner.spec import entrypoint
from runner.spec_schema import RunSpec
from runner.templating import render_template
from runner.unbuilt import notice, unbuilt_image
from runner.validation.inputs import EnvPlan, check_spec, load_env
from runner.validation.manifests import validate_manifests

RAY_VERSION = "2.60.0"  # the ray pinned in pyproject.toml; a test keeps them equal
# Annotations on the run's objects, under the platform's domain.
SOURCE_ANNOTATION = f"{labels.DOMAIN}/source"
PREFLIGHT_ANNOTATION = f"{labels.DOMAIN}/preflight"
RAY_CLUSTER_ANNOTATION = f"{labels.DOMAIN}/ray-cluster"
SENTINEL_RESOURCES = {"cpu": "100m", "memory": "256Mi"}
# The RayJob's submitter (KubeRay runs `ray job submit` in it; it fills in the command):
# KubeRay's own default requests, as requests and limits.
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES = {"cpu": "500m", "memory": "1Gi"}


def exact_bytes(count: int) -> str:
    """A memory quantity with no rounding: the largest binary unit that divides it."""
    for suffix, scale in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if count % scale == 0:
            return f"{count // scale}{suffix}"
    return str(count)


def exact_cpu(cores: float) -> str:
    """A CPU quantity: whole cores, else millicores (Kubernetes' finest CPU unit)."""
    milli = round(cores * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


@dataclass(frozen=True)
class Rendered:
    """A rendered run: its resolved plan, its validated manifests, and the layout its driver
    composes (None: the run does not start the driver, or the driver is not installed)."""

    plan: Plan
    manifests: list[dict]
    layout: dict | None = None
    notices: tuple[str, ...] = ()
    """One line each: what keeps the run from starting as rendered (runner.unbuilt)."""

    def summary(self) -> str:
        """The plan's totals, and what trains: `...; trains on 16 GPUs: FSDP 8 x 2 replica
        groups`."""
        return self.plan.totals() + (f"; {layout_line(self.layout)}" if self.layout else "")


def layout_line(layout: dict) -> str:
    """The composed layout in words (runner.layout's JSON)."""
    world, fsdp = layout["world_size"], layout["fsdp_size"]
    line = (f"trains on {count(world, 'GPU')}: FSDP {fsdp} x {count(world // fsdp, 'replica')}"
            f" in {count(layout['replica_groups'], 'replica group')}")  # fmt: skip
    for name, service in layout["services"].items():
        line += f", {name} {service['replicas']} on {count(service['gpus'], 'GPU')}"
    if layout["idle_gpus"]:
        line += f", {count(layout['idle_gpus'], 'GPU')} idle"
    return line


def count(number: float, noun: str) -> str:
    """`1 GPU`, `2 GPUs`, `0.5 GPUs`."""
    return f"{number:g} {noun}{'' if number == 1 else 's'}"


def _secret(pair: tuple[str, str]) -> dict[str, str]:
    return {"name": pair[0], "key": pair[1]}


# Every training container (head, workers, a Job's pods) signs and checks the run's
# checkpoints with its team's key (docs/checkpoint.md, "Authenticated checkpoints"), and
# signs in to ClickHouse as the insert-only `runs` user when the run sends its metrics
# there (`logging.clickhouse_url`; docs/security.md).
TRAINING_SECRETS = {
    labels.CHECKPOINT_KEY_ENV: _secret(labels.CHECKPOINT_KEY_SECRET),
    labels.CLICKHOUSE_PASSWORD_ENV: _secret(labels.CLICKHOUSE_RUNS_SECRET),
}
TRAINING_ENV = {labels.CLICKHOUSE_USER_ENV: labels.CLICKHOUSE_RUNS_USER}
# Clients of a Ray cluster that KubeRay does not set up itself (the sentinel's shell).
RAY_CLIENT_ENV = {"RAY_AUTH_MODE": "token"}
RAY_CLIENT_SECRETS = {"RAY_AUTH_TOKEN": _secret(labels.RAY_TOKEN_SECRET)}


def _pod(plan: Plan, env: EnvPlan, role: str, configmap: str | None) -> dict[str, Any]:
    """Values shared by every pod template of the run (container, resources added later)."""
    spec = plan.spec
    training = role in ("head", "worker", "job")
    working_dir = spec.working_dir if spec.working_dir and "://" not in spec.working_dir else None
    return {
        "labels": {**_run_labels(spec), labels.ROLE: role},
        "priority_class": plan.priority_class,
        "service_account": labels.TRAINING_KSA,  # Workload Identity: bucket access
        "image": spec.image,
        "working_dir": working_dir,
        "secrets": {**env.secrets, **(TRAINING_SECRETS if training else {})},
        **({"env": dict(TRAINING_ENV)} if training else {}),
        # a stop (preemption, eviction, spot reclaim) leaves time for the final save
        "termination_grace": plan.grace.grace_s if training else None,
        "configmap": configmap,
        "run_as_user": spec.run_as_user,
    }


def _run_labels(spec: RunSpec) -> dict[str, str]:
    return labels.run_labels(spec.name, spec.run_team, spec.cluster, spec.type)


def _worker(plan: Plan, env: EnvPlan, configmap: str | None, role: str) -> dict[str, Any]:
    spec, accel = plan.spec, plan.accelerator
    pod = pod_context(
        **_pod(plan, env, role, configmap),
        container="ray-worker" if spec.type != "job" else "main",
        resources={"cpu": exact_cpu(plan.cpus), "memory": exact_bytes(plan.memory)},
        shm=exact_bytes(plan.shm),
    )
    if accel is None:
        pod["node_selector"] = labels.cpu_node_labels()
        return pod
    gpu = gpu_settings(
        accel,
        plan.gpus,
        namespace=spec.namespace,
        resource_group=spec.resource_group,
        preemptible=spec.preemptible,
        env_overrides=env.values,
    )
    gpu.apply(pod)
    pod["avoid_nodes"] = list(spec.avoid_nodes)
    if spec.rack_affinity:
        block = spec.rack_affinity == "block"
        pod["rack_topology"] = labels.TOPOLOGY_BLOCK if block else labels.TOPOLOGY_SUBBLOCK
        pod["rack_selector"] = {labels.RUN: spec.name, labels.ROLE: role}
    if plan.keep_seconds:
        pod["labels"][keepnodes.POD_LABEL] = "true"
        pod["annotations"] = {**pod["annotations"], keepnodes.POD_SECONDS: str(plan.keep_seconds)}
    return pod


def _head(plan: Plan, env: EnvPlan, configmap: str | None) -> dict[str, Any]:
    return pod_context(
        **_pod(plan, env, "head", configmap),
        container="ray-head",
        node_selector=labels.cpu_node_labels(),
        resources={"cpu": exact_cpu(plan.head_cpus), "memory": exact_bytes(plan.head_memory)},
        shm=exact_bytes(min(CPU_ONLY_SHM, plan.head_memory // 2)),
    )


def _submitter(plan: Plan) -> dict[str, Any]:
    """The submitter pod of a RayJob, given so it is confined like every other pod of the run
    (KubeRay's default one has no securityContext). No service account: it only talks to the
    Ray head's job API."""
    values = {**_pod(plan, EnvPlan(), "submitter", None), "service_account": None}
    return pod_context(
        **values,
        container=SUBMITTER_CONTAINER,
        restart_policy="Never",
        node_selector=labels.cpu_node_labels(),
        resources=dict(SUBMITTER_RESOURCES),
        shm="64Mi",
    )


def _sentinel(plan: Plan, env: EnvPlan) -> dict[str, Any]:
    name = plan.spec.name
    pod = pod_context(
        **{**_pod(plan, EnvPlan(), "sentinel", None), "run_as_user": NOBODY},
        container="sentinel",
        node_selector=labels.cpu_node_labels(),
        shm="64Mi",
        resources=dict(SENTINEL_RESOURCES),
        command=["sleep", "infinity"],
        env={
            "RAY_CLUSTER": name,
            "RAY_ADDRESS": f"http://{name}-head-svc:8265",
            "RAY_CLIENT_ADDRESS": f"ray://{name}-head-svc:10001",
            **RAY_CLIENT_ENV,
        },
    )
    pod["secrets"] = dict(RAY_CLIENT_SECRETS)
    return {
        "name": f"{name}-sentinel",
        "selector": {labels.RUN: name, labels.ROLE: "sentinel"},
        "pod": pod,
    }


def context(plan: Plan, env: EnvPlan) -> dict[str, Any]:
    """Everything the run templates read, under the name `run`."""
    spec = plan.spec
    configmap = f"{spec.name}-env" if env.values else None
    annotations = {
        SOURCE_ANNOTATION: spec.origin,
        PREFLIGHT_ANNOTATION: str(spec.preflight).lower(),
    }
    run: dict[str, Any] = {
        "name": spec.name,
        "namespace": spec.namespace,
        "pods": spec.pods,
        "ttl_seconds": spec.ttl_seconds,
        "labels": _run_labels(spec),
        "object_labels": {**_run_labels(spec), labels.KUEUE_QUEUE_LABEL: labels.LOCAL_QUEUE},
        "annotations": annotations,
        "configmap": configmap,
        "env_values": env.values,
        "ray_version": RAY_VERSION,
        "head_start_params": {"dashboard-host": "0.0.0.0", "num-cpus": "0", "num-gpus": "0"},
        "worker_group": plan.accelerator.name.lower() if plan.accelerator else "cpu",
        "ray_token_secret": labels.RAY_TOKEN_SECRET[0],
        "runtime_env_yaml": None,
    }
    if spec.working_dir and "://" in spec.working_dir:
        run["runtime_env_yaml"] = f"working_dir: {json.dumps(spec.working_dir)}\n"
    shape, budget = shape_of(plan), plan.grace.budget_s
    if spec.type == "job":
        run["worker"] = _worker(plan, env, configmap, "job")
        command = entrypoint(spec, shape=shape, budget_s=budget)
        run["worker"].update(restart_policy="Never", command=command)
    else:
        run["worker"] = _worker(plan, env, configmap, "worker")
        run["head"] = _head(plan, env, configmap)
    if spec.type == "rayjob":
        run["entrypoint"] = shlex.join(entrypoint(spec, shape=shape, budget_s=budget))
        run["submitter"] = _submitter(plan)
    if spec.type == "raycluster":
        run["sentinel"] = _sentinel(plan, env)
        annotations[RAY_CLUSTER_ANNOTATION] = spec.name
    return run


def render(spec: RunSpec) -> Rendered:
    """Check, resolve, render and validate one run."""
    check_spec(spec)
    plan = resolve(spec)
    env = load_env(spec)
    layout = None
    shape = shape_of(plan)
    if shape and not spec.cmd and spec.train_config:  # the driver: check what it composes
        layout = check_layout(spec, entrypoint(spec, shape=shape, budget_s=plan.grace.budget_s))
    manifests = render_template(spec.type, run=context(plan, env))
    validate_manifests(manifests, plan.cluster.kubernetes_version, spec.origin)
    unbuilt = unbuilt_image(spec)
    return Rendered(plan, manifests, layout, (notice(spec, unbuilt),) if unbuilt else ())


def render_run(spec: RunSpec) -> list[dict]:
    """The validated manifests of one run (what `runner render` writes to apps/)."""
    return render(spec).manifests
