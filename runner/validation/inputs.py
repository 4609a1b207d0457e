"""Checks of a run definition before anything renders: names, image, flag combinations, env.

Pure functions over a RunSpec; each problem is one `InputError` naming the file and field (or
the flag). `check_spec(spec)` runs them all; `load_env(spec)` reads the env file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from catalog.errors import InputError
from catalog.loader import repo_root
from runner.boundedfile import FileMissing, is_regular_file
from runner.runfile import read_yaml_file, shown
from runner.spec import display_path
from runner.spec_schema import COMMAND_LINE, RunSpec

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# KubeRay appends suffixes (`-<5 chars>` for a RayJob's cluster, `-head-svc`), so its names
# are shorter than a DNS label: ray-operator/controllers/ray/utils/constant.go (v1.4.2).
MAX_NAME = {"rayjob": 47, "raycluster": 53, "job": 56}
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
IMAGE = re.compile(r"^[a-z0-9][a-z0-9._\-/:]*[a-z0-9](@sha256:[0-9a-f]{64})?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # a DNS-1123 subdomain
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")  # a Secret data key
# A secret-looking name: one of these words between underscores (HF_TOKEN, DB_PASSWORD,
# WANDB_API_KEY), not a word that merely contains one (TOKENIZER_PATH, MAX_TOKENS).
SECRET_LIKE = re.compile(
    r"(?:^|_)(?:PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|PRIVATE_KEY|CREDENTIALS?)(?:_|$)", re.I
)


@dataclass
class EnvPlan:
    """Env entries of the run: plain values (a ConfigMap) and secret references."""

    values: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)


def check_name(spec: RunSpec, key: str, value: str, limit: int = 63) -> None:
    if len(value) > limit:
        raise spec.error(key, f"{shown(value)} is longer than {limit} characters")
    if not DNS_LABEL.match(value):
        raise spec.error(
            key,
            f"{shown(value)} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting with a letter)",
        )


def check_image(spec: RunSpec) -> None:
    """A valid reference, pinned by digest (or a tag the run allows, or an image of the
    catalog not built yet: runner.unbuilt)."""
    from runner.unbuilt import unbuilt_image

    image = spec.image
    if not IMAGE.match(image):
        raise spec.error("image", f"{shown(image)} is not an image reference")
    if DIGEST.search(image) or spec.allow_mutable_tag or unbuilt_image(spec):
        return
    raise spec.error(
        "image",
        f"{shown(image)} is not pinned by digest (@sha256:<64 hex>); "
        "set allow_mutable_tag to accept a tag",
    )


def check_combinations(spec: RunSpec) -> None:
    """Flag combinations that make no sense for the run type."""
    if spec.type == "raycluster":
        for key in ("cmd", "train_config", "resume"):
            if getattr(spec, key):
                raise spec.error(key, "a raycluster runs no entry point; submit jobs to it")
        if spec.train_overrides:
            raise spec.error("train_overrides", "a raycluster runs no entry point")
    elif spec.cmd is not None and not spec.cmd.strip():
        raise spec.error("cmd", "is empty")
    elif not spec.cmd and not spec.train_config:
        raise spec.error("cmd", f"a {spec.type} needs cmd or train_config")
    if spec.cmd and spec.train_config:
        # blame the one given on the command line, if either was
        key = "train_config" if spec.where("train_config")[0] == COMMAND_LINE else "cmd"
        raise spec.error(key, "give cmd or train_config, not both")
    if spec.cmd and (spec.train_overrides or spec.resume):
        key = "train_overrides" if spec.train_overrides else "resume"
        raise spec.error(key, "applies to the driver (train_config), not to cmd")
    for key in ("train_config", "env_file", "working_dir", "cmd"):
        if "\x00" in (getattr(spec, key) or ""):
            raise spec.error(key, "contains a NUL character")
    if spec.train_config:
        check_train_config(spec)
    if spec.working_dir and "://" in spec.working_dir:
        if spec.type != "rayjob":
            raise spec.error("working_dir", "a URI working_dir needs a rayjob")
    elif spec.working_dir and not spec.working_dir.startswith("/"):
        raise spec.error("working_dir", f"{shown(spec.working_dir)} must be absolute or a URI")
    if spec.resume and "://" not in spec.resume:
        raise spec.error(
            "resume", f"{shown(spec.resume)} is not a URI (gs://bucket/team/run/step-N)"
        )


def check_train_config(spec: RunSpec) -> None:
    """`train_config` is a YAML file of the repository, named relative to its root (what
    the pod's working directory holds): never an absolute path, a path that leaves the
    repository (`..`, a symlink) or anything but a regular file (/proc, a FIFO, a folder)."""
    text = spec.train_config or ""
    if Path(text).is_absolute():
        raise spec.error("train_config", f"{shown(text)} must be relative to the repository root")
    if Path(text).suffix not in (".yaml", ".yml"):
        raise spec.error("train_config", f"{shown(text)} is not a YAML file (.yaml)")
    root = repo_root()
    try:
        inside = (root / text).resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError, ValueError):  # a symlink loop
        inside = False
    if not inside:
        raise spec.error("train_config", f"{shown(text)} is outside the repository")
    if not is_regular_file(root / text):
        missing = not os.path.lexists(root / text)
        raise spec.error("train_config", f"{shown(text)} " + (
            "does not exist" if missing else "is not a regular file"))  # fmt: skip


def check_spec(spec: RunSpec) -> None:
    """Every input check that needs no catalog."""
    check_name(spec, "name", spec.name, MAX_NAME[spec.type])
    check_name(spec, "namespace", spec.namespace)
    check_name(spec, "cluster", spec.cluster)
    if spec.team is not None:
        check_name(spec, "team", spec.team)
    check_image(spec)
    check_combinations(spec)


def _env_path(spec: RunSpec) -> Path:
    path = Path(spec.env_file)
    if path.is_absolute() or spec.where("env_file")[0] == COMMAND_LINE:
        return path
    return repo_root() / path


def _entry(source: str, label: str, key: Any, value: Any, env: EnvPlan) -> None:
    if not isinstance(key, str) or not ENV_NAME.match(key):
        raise InputError(source, label, f"{shown(key)} is not an environment variable name")
    if isinstance(value, dict):
        ref = value.get("secretKeyRef")
        if (
            set(value) != {"secretKeyRef"}
            or not isinstance(ref, dict)
            or set(ref) != {"name", "key"}
            or not isinstance(ref["name"], str)
            or not SECRET_NAME.match(ref["name"])
            or not isinstance(ref["key"], str)
            or not SECRET_KEY.match(ref["key"])
        ):
            raise InputError(source, label, "a mapping must be {secretKeyRef: {name: S, key: K}}")
        env.secrets[key] = {"name": ref["name"], "key": ref["key"]}
        return
    if value is None or isinstance(value, list):
        raise InputError(source, label, "needs a plain value or a secretKeyRef")
    if SECRET_LIKE.search(key):
        raise InputError(
            source, label, "looks like a secret; reference it with {secretKeyRef: {name, key}}"
        )
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    env.values[key] = text


def load_env(spec: RunSpec) -> EnvPlan:
    """The env file (if any) then `env` entries; secrets stay references."""
    env = EnvPlan()
    if spec.env_file:
        path = _env_path(spec)
        source = display_path(path)
        try:
            data = read_yaml_file(path, source) or {}
        except FileMissing:
            raise spec.error("env_file", f"{shown(spec.env_file)} does not exist") from None
        if not isinstance(data, dict):
            raise InputError(source, None, "expected a mapping of NAME: value")
        for key, value in data.items():
            _entry(source, str(key), key, value, env)
    source, label = spec.where("env")
    for key, value in spec.env.items():
        _entry(source, label if source == COMMAND_LINE else f"env.{key}", key, value, env)
    return env
