"""The run definition's schema: `RunSpec`, the bounds of its values and the flag of each field.

Every field of `runs/*.yaml` is a `runner submit`/`runner render` flag with underscores
(`FLAGS`, `flag_name`). A RunSpec remembers where each value came from, the file or the
command line, so an error names the file and the field or the flag as typed (`locate`).
Reading a file and applying flags is `runner.spec` (`load_run`, `build_spec`).

    from runner.spec_schema import RunSpec, flag_name
    RunSpec.model_fields["pods"].description  # "worker pods (rayjob/raycluster) or job pods"
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator

from catalog.errors import InputError
from runner.runfile import shown

COMMAND_LINE = "command line"
RUN_TYPES = ("rayjob", "raycluster", "job")
Quantity = str | int | float
# Bounds of a run definition's values (docs/runner.md, Validation), file or flag alike.
MAX_TEXT = 4096  # characters of a string: names, paths, image, URIs, each override
MAX_CMD = 32 * 1024  # characters of `cmd` and of an env value
MAX_ENTRIES = 256  # entries of train_overrides and of env
MAX_PODS = 10_000
MAX_GPUS = 64
MAX_TTL = 2**31 - 1  # Kubernetes' ttlSecondsAfterFinished is an int32
SURROGATE = re.compile("[\ud800-\udfff]")
# field -> the flags that set it; the first names the field in messages unless another was
# typed. Aliases follow the historical CLI (`--accelerators`, `--docker-image`, `--env`).
# `name` and `type` are the NAME and TYPE arguments of `runner submit`; `env` has no flag.
FLAGS: dict[str, tuple[str, ...]] = {
    "name": ("NAME",),
    "type": ("--type", "TYPE"),
    "accelerator": ("--accelerator", "--accelerators"),
    "image": ("--image", "--docker-image"),
    "env_file": ("--env-file", "--env"),
    "train_overrides": ("--set",),
    "avoid_nodes": ("--avoid-node",),
    "env": ("env",),
}


def flag_name(field: str) -> str:
    """The flag that sets `field` (`gpus` -> `--gpus`, `train_overrides` -> `--set`)."""
    return FLAGS.get(field, ("--" + field.replace("_", "-"),))[0]


NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")  # a DNS-1123 subdomain


class RunSpec(BaseModel):
    """One run as a researcher asks for it; defaults are resolved later from the catalogs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="run name: a DNS-1123 label, unique in the namespace")
    type: Literal["rayjob", "raycluster", "job"] = Field(
        description="rayjob (temporary RayCluster), raycluster (persistent) or job (no Ray)"
    )
    cluster: str = Field(description="cluster catalog name (clusters/<name>/cluster.yaml)")
    namespace: str = Field(description="team namespace on the cluster")
    team: str | None = Field(default=None, description="team label; defaults to namespace")
    pods: int = Field(
        default=1, ge=1, le=MAX_PODS, description="worker pods (rayjob/raycluster) or job pods"
    )
    gpus: int | None = Field(
        default=None,
        ge=0,
        le=MAX_GPUS,
        description="GPUs per pod; default: a whole node with accelerator",
    )
    cpus: Quantity | None = Field(default=None, description="CPU per pod (8, 7.5, 500m)")
    memory: Quantity | None = Field(default=None, description="memory per pod (512Gi)")
    accelerator: str | None = Field(default=None, description="accelerator key (H100, H200)")
    image: str = Field(description="container image, pinned by digest (@sha256:...)")
    allow_mutable_tag: bool = Field(default=False, description="accept an image tag")
    working_dir: str | None = Field(
        default=None, description="absolute directory in the image, or a URI (rayjob only)"
    )
    env_file: str | None = Field(
        default=None, description="YAML of env values and secretKeyRef references"
    )
    env: dict[str, Any] = Field(default_factory=dict, description="env entries; win over env_file")
    preemptible: bool = Field(default=False, description="low priority; may use spot nodes")
    priority: str | None = Field(default=None, description="priority class name (not preemptible)")
    cmd: str | None = Field(default=None, description="command line; replaces the driver command")
    train_config: str | None = Field(
        default=None, description="driver Hydra YAML, relative to the repository root"
    )
    train_overrides: list[str] = Field(
        default_factory=list, description="driver config overrides, key=value"
    )
    ttl_seconds: int = Field(
        default=3600, ge=0, le=MAX_TTL, description="keep finished objects this long"
    )
    head_cpus: Quantity = Field(default=4, description="CPU of the Ray head (CPU pool)")
    head_memory: Quantity = Field(default="16Gi", description="memory of the Ray head")
    rack_affinity: Literal["block", "subblock"] | None = Field(
        default=None, description="prefer packing workers into one topology block or sub-block"
    )
    shm: Quantity | None = Field(default=None, description="/dev/shm size per pod")
    resource_group: str | None = Field(
        default=None, description="only GPU pools of this resource group"
    )
    resume: str | None = Field(default=None, description="checkpoint URI to resume from")
    preflight: bool = Field(default=True, description="run preflight checks after placement")
    keep_nodes: str | None = Field(
        default=None,
        description="rayjob: keep the worker nodes for the namespace this long after the run"
        " (30m, 2h, 1h30m; 1m to 24h), so a relaunch lands on them",
    )

    avoid_nodes: list[str] = Field(
        default_factory=list,
        description="nodes the run's GPU pods must not be placed on (a relaunch after a node"
        " fault; `runner diagnose --propose` sets it)",
    )
    run_as_user: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TTL,
        description="run the run's containers as this non-root user id (the image must allow it)",
    )
    model_params: float | None = Field(
        default=None,
        gt=0,
        le=1e15,
        description="parameters of the model the run trains (7e9, 7B, 350M): the pods' grace "
        "period fits its final checkpoint",
    )
    model_shards: int = Field(
        default=1,
        ge=1,
        le=MAX_PODS,
        description="pods one model copy's checkpoint is written from (1 under DDP; the FSDP "
        "pods when sharded)",
    )

    _sources: dict[str, str] = PrivateAttr(default_factory=dict)
    _origin: str = PrivateAttr(default=COMMAND_LINE)
    _flags: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("*", mode="before")
    @classmethod
    def _bounded(cls, value: Any, info: ValidationInfo) -> Any:
        """Every string bounded, valid UTF-8 and without NUL; every list or mapping short;
        true/false only where the field is a yes/no."""
        no_bool(cls, value, info)
        long = info.field_name in ("cmd", "env")
        if isinstance(value, list | dict):
            if len(value) > MAX_ENTRIES:
                raise ValueError(f"{len(value)} entries; at most {MAX_ENTRIES}")
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            for item in items:
                _check_text(item, MAX_CMD if long else MAX_TEXT)
        _check_text(value, MAX_CMD if long else MAX_TEXT)
        return value

    @field_validator("model_params", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        """`7B`, `350M`, `1.5T`, `20K` or a number."""
        if not isinstance(value, str):
            return value
        scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(value.strip()[-1:].upper())
        try:
            return float(value.strip()[:-1]) * scale if scale else float(value)
        except ValueError:
            raise ValueError(f"{shown(value)} is not a parameter count (7e9, 7B, 350M)") from None

    @field_validator("train_overrides")
    @classmethod
    def _key_value(cls, value: list[str]) -> list[str]:
        for item in value:
            if "=" not in item or item.startswith("="):
                raise ValueError(f"{shown(item)} is not key=value")
        return value

    @field_validator("avoid_nodes")
    @classmethod
    def _node_names(cls, value: list[str]) -> list[str]:
        for item in value:
            if not NODE_NAME.match(item):
                raise ValueError(f"{shown(item)} is not a node name")
        return value

    @property
    def run_team(self) -> str:
        return self.team or self.namespace

    @property
    def origin(self) -> str:
        """The run definition file (repository-relative) or `command line`."""
        return self._origin

    def where(self, field: str) -> tuple[str, str]:
        """(source, field label) for an error about `field`: the file and key, or the flag."""
        return locate(field, self._sources, self._origin, self._flags)

    def error(self, field: str, message: str) -> InputError:
        """An InputError that names where `field` was set."""
        source, label = self.where(field)
        return InputError(source, label, message)

    def overridden(self) -> list[str]:
        """Fields set on the command line, in field order."""
        return [f for f in type(self).model_fields if self._sources.get(f) == COMMAND_LINE]


def no_bool(model: type[BaseModel], value: Any, info: ValidationInfo) -> None:
    """A field validator's check: true/false for a field that is not a yes/no (pydantic
    would take `pods: true` as 1). ValueError naming what the field takes."""
    if not isinstance(value, bool):
        return
    annotation = model.model_fields[info.field_name].annotation
    if annotation is bool or bool in get_args(annotation):
        return
    raise ValueError(f"expected a number, not {str(value).lower()}")


def _check_text(value: Any, limit: int) -> None:
    if not isinstance(value, str):
        return
    if len(value) > limit:
        raise ValueError(f"{len(value)} characters; at most {limit}")
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    if SURROGATE.search(value):
        raise ValueError("is not valid UTF-8 text")


def locate(
    field: str, sources: dict[str, str], origin: str, flags: dict[str, str]
) -> tuple[str, str]:
    """(source, field label) of `field`: the file and key it was set in, or the flag
    typed for it (`flags`, else `flag_name`) when `sources` says the command line."""
    top = field.split(".")[0].split("[")[0]
    source = sources.get(top, origin)
    if source == COMMAND_LINE:
        return COMMAND_LINE, flags.get(top) or flag_name(top)
    return source, field
