"""Run definitions: loading `runs/*.yaml`, command-line overrides and the entry point.

A run definition is flat YAML whose keys are the `runner submit`/`runner render` flags with
underscores (`FLAGS`). Flags replace file values; every value remembers where it came from, so
an error names either the file and the field (`runs/x.yaml: gpus: ...`) or the flag as typed
(`command line: --docker-image: ...`). The schema, `RunSpec` and `FLAGS`, is in
`runner.spec_schema`.

    from runner.spec import load_run, entrypoint
    spec = load_run("runs/examples/tiny-lm.yaml", {"pods": 4})
    entrypoint(spec)  # ["python", "-m", "driver.train", "runs/train/tiny-lm.yaml", ...]
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from catalog import labels
from catalog.errors import InputError, from_validation
from catalog.loader import repo_root
from runner.runfile import read_yaml_file, shown
from runner.spec_schema import COMMAND_LINE, MAX_ENTRIES, SURROGATE, RunSpec, locate


def display_path(path: str | Path) -> str:
    """A path relative to the repository root when inside it, else as given (also when it
    cannot be resolved: a symlink loop, a NUL in the name; reading it then says why)."""
    try:
        return str(Path(path).resolve().relative_to(repo_root()))
    except (ValueError, OSError, RuntimeError):  # outside the root; a NUL; a symlink loop
        return str(path)


def check_overrides(items: Any, source: str, field: str = "train_overrides") -> None:
    """`key=value` items of one place (a file's list, or the command line's `--set`s): the
    same key twice is refused, naming both (a later place may override an earlier one)."""
    if not isinstance(items, list | tuple) or len(items) > MAX_ENTRIES:
        return  # the schema refuses it, saying so
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        if not isinstance(item, str) or "=" not in item:
            continue
        key = item.split("=", 1)[0].strip().lstrip("+~")
        if key in seen:
            label = f"{field}[{index}]" if source != COMMAND_LINE else field
            raise InputError(source, label, f"{shown(key)} is set twice (entries "
                             f"{seen[key] + 1} and {index + 1}); give each key once")  # fmt: skip
        seen[key] = index


def build_spec(
    data: dict[str, Any],
    origin: str = COMMAND_LINE,
    overrides: dict[str, Any] | None = None,
    flags: dict[str, str] | None = None,
) -> RunSpec:
    """A RunSpec from file data (`origin` names the file) with flag `overrides` on top.

    Overrides replace file values (None means not given). `flags` maps a field to the flag
    the user typed for it, so a message names that flag (default: `flag_name(field)`).
    """
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    sources = {k: origin for k in data} | dict.fromkeys(given, COMMAND_LINE)
    flags = dict(flags or {})
    try:
        spec = RunSpec.model_validate({**data, **given})
    except ValidationError as err:
        located = from_validation(origin, err)
        source, label = locate(located.field or "", sources, origin, flags)
        if source == COMMAND_LINE:
            raise InputError(COMMAND_LINE, label, located.message) from None
        raise located from None
    spec._sources, spec._origin, spec._flags = sources, origin, flags
    return spec


def read_run(path: str | Path) -> tuple[dict[str, Any], str]:
    """(data, display name) of a run definition file; errors name the file."""
    if SURROGATE.search(str(path)):
        raise InputError(COMMAND_LINE, "RUN", f"{shown(str(path))}: the name is not UTF-8")
    if "\x00" in str(path):
        raise InputError(COMMAND_LINE, "RUN", f"{shown(str(path))}: the name contains a NUL")
    origin = display_path(path)
    data = read_yaml_file(Path(path), origin)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(origin, None, "expected a mapping of run definition keys")
    check_overrides(data.get("train_overrides"), origin)
    return data, origin


def load_run(
    path: str | Path, overrides: dict | None = None, flags: dict[str, str] | None = None
) -> RunSpec:
    """Read a run definition file and apply flag overrides; errors name file and field."""
    data, origin = read_run(path)
    return build_spec(data, origin, overrides, flags)


SHAPE_KEYS = ("nodes", "gpus_per_node", "accelerator", "cpus_per_gpu")
"""The driver's `shape.*` keys: the shape the renderer rendered (driver/config/layout.py)."""


def shape_words(shape: dict | None) -> list[str]:
    """`shape.<key>=<value>` for the driver, in `SHAPE_KEYS` order (none without a shape)."""
    if not shape:
        return []
    return [f"shape.{key}={shape[key]}" for key in SHAPE_KEYS]


def entrypoint(spec: RunSpec, local: bool = False, shape: dict | None = None,
               budget_s: int | None = None) -> list[str]:  # fmt: skip
    """The command the run executes: `cmd`, else the driver with the run's config, the
    `shape` it was rendered for (pods, GPUs each, accelerator, CPUs per GPU), from which the
    driver composes its layout (the manifest's: an override may not set it), and, rendered,
    `checkpoint.preemption_budget_s` (the final save's part of the pods' grace period,
    runner.resolve)."""
    if spec.cmd:
        try:
            return shlex.split(spec.cmd)
        except ValueError as err:
            raise spec.error("cmd", f"cannot split into words: {err}") from None
    if not spec.train_config:
        raise spec.error("train_config", "a run needs cmd or train_config")
    for word in spec.train_overrides:
        if word.lstrip("+~").startswith("shape."):
            message = f"{word.split('=')[0]}: the shape is the manifest's (pods, gpus, accelerator)"
            raise spec.error("train_overrides", message)
    team = spec.run_team
    words = ["python", "-m", "driver.train", spec.train_config]
    words += [f"run.name={spec.name}", f"run.team={team}", f"run.cluster={spec.cluster}"]
    if not local:
        from catalog.loader import load_cluster

        source, label = spec.where("cluster")
        cluster = load_cluster(spec.cluster, source=source, field=label)
        words.append(f"checkpoint.root=gs://{cluster.buckets.checkpoints}")
        # every rank's rows go to the cluster's ClickHouse; the chDB store is for local runs;
        # metrics and log lines go over OTLP to the platform's collector; crash bundles are
        # kept, signed, in the cluster's bundles bucket under the team's prefix
        words += [f"logging.clickhouse_url={labels.CLICKHOUSE_URL}", "logging.store=false",
                  f"logging.otel_endpoint={labels.OTEL_COLLECTOR_URL}",
                  f"logging.bundle_root=gs://{cluster.buckets.bundles}"]  # fmt: skip
    words += shape_words(shape)
    if spec.resume:
        words.append(f"checkpoint.resume={spec.resume}")
    if budget_s is not None:
        words.append(f"checkpoint.preemption_budget_s={budget_s}")
    return words + list(spec.train_overrides)


def dump_spec(spec: RunSpec) -> dict[str, Any]:
    """The run definition as YAML data: the fields that differ from their defaults."""
    return spec.model_dump(exclude_defaults=True, mode="json")
