"""A DiLoCo experiment's definition: the file's model, loading and cross-field checks, names.

An experiment file holds the fields of a run definition shared by every learner (image,
namespace, train_config, env ...), a `diloco` block (how learners sync), a `synchronizer`
block (where it runs) and `learners` (a name, a cluster and any run definition fields of its
own: pods, gpus, accelerator ...). `runner.experiment` is the public face (docs/diloco.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from catalog import labels
from catalog.errors import InputError, from_validation
from runner.spec_schema import no_bool

EXPERIMENT_LABEL, LEARNER_LABEL = labels.EXPERIMENT, labels.LEARNER
SYNC_ROLE = labels.SYNCHRONIZER
KEY_ENV = "REVE_DILOCO_"
"""Prefix of the variables holding a learner's (and the synchronizer's) Curve keys, filled
from Secrets (the driver's default `diloco.keys_env_prefix`)."""
DRIVER_SECTION = "diloco"
"""The driver config's section a learner's settings go to (`diloco.<key>=...` overrides)."""
INTERNAL_LB = {
    "networking.gke.io/load-balancer-type": "Internal",
    "networking.gke.io/internal-load-balancer-allow-global-access": "true",
}
Quantity = str | int | float


class Strict(BaseModel):
    """A block of the experiment file: unknown keys refused, true/false only for yes/no."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool(cls, value: Any, info: ValidationInfo) -> Any:
        no_bool(cls, value, info)
        return value


class Diloco(Strict):
    """How learners sync (the driver's `diloco` section, synchronizer.OuterConfig)."""

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


class Synchronizer(Strict):
    """Where the synchronizer runs and how learners reach it."""

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
    from runner.spec import check_overrides

    for i, learner in enumerate(exp.learners):
        own = (learner.model_extra or {}).get("train_overrides")
        check_overrides(own, origin, f"learners[{i}].train_overrides")
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
