"""The run flags of `runner render`, `runner validate` and `runner submit`: one option per
run definition field, the overrides they give, and the flags as typed for the apps/ header.

    @click.command()
    @run_options  # --type, --cluster, -n/--namespace ... --preflight/--no-preflight, --set
    def command(**options):
        overrides, typed = overrides_from(options)  # ({"pods": "4"}, {"pods": "--pods"})
        spec = load_with_flags("runs/examples/tiny-lm.yaml", overrides, typed)
"""

from __future__ import annotations

import shlex
from typing import Any

import click

from catalog.errors import InputError
from runner.spec import build_spec, check_overrides, read_run
from runner.spec_schema import COMMAND_LINE, FLAGS, RunSpec, flag_name

# Run definition fields that have a flag, in --help order. Values stay strings here: the
# RunSpec schema parses them, so a bad value is one line naming the flag, like any other.
_VALUE_FIELDS = [
    "type", "cluster", "namespace", "team", "pods", "gpus", "cpus", "memory", "accelerator",
    "image", "working_dir", "env_file", "priority", "cmd", "train_config", "ttl_seconds",
    "head_cpus", "head_memory", "rack_affinity", "shm", "resource_group", "resume", "keep_nodes",
    "run_as_user", "model_params", "model_shards",
]  # fmt: skip
_BOOL_FIELDS = ["preemptible", "allow_mutable_tag", "preflight"]
_LIST_FIELDS = ["train_overrides", "avoid_nodes"]  # repeatable flags, added to the file's list
_SHORT = {"namespace": "-n"}
_METAVAR = {
    "type": "[rayjob|raycluster|job]",
    "rack_affinity": "[block|subblock]",
    "pods": "N",
    "gpus": "N",
    "ttl_seconds": "SECONDS",
    "resume": "URI",
    "keep_nodes": "DURATION",
    "run_as_user": "UID",
    "model_params": "COUNT",
    "model_shards": "N",
}


def _param(field: str, index: int) -> str:
    return field if index == 0 else f"{field}__{index}"


def _flags(field: str) -> list[str]:
    return [f for f in FLAGS.get(field, (flag_name(field),)) if f.startswith("-")]


def run_options(function):
    """Decorate a command with one flag per run definition field (all default to unset).

    Each alias is its own option, so a message can name the flag the user typed. Decorators
    apply inside out: --set ends up last in --help, the value flags first.
    """
    function = click.option(
        "--avoid-node",
        "avoid_nodes",
        multiple=True,
        metavar="NODE",
        help="a node the GPU pods must not use (repeatable); added to the file's avoid_nodes",
    )(function)
    function = click.option(
        "--set",
        "train_overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="driver config override (repeatable); appended after the file's train_overrides",
    )(function)
    for field in reversed(_BOOL_FIELDS):
        flag = flag_name(field)
        pair = f"{flag}/--no-{flag[2:]}"
        help_text = RunSpec.model_fields[field].description
        function = click.option(pair, field, default=None, help=help_text)(function)
    for field in reversed(_VALUE_FIELDS):
        flags = _flags(field)
        for index, flag in reversed(list(enumerate(flags))):
            text = RunSpec.model_fields[field].description if index == 0 else f"same as {flags[0]}"
            decls = [flag, *([_SHORT[field]] if field in _SHORT and index == 0 else [])]
            option = click.option(
                *decls, _param(field, index), default=None, help=text,
                metavar=_METAVAR.get(field, "TEXT"),
            )  # fmt: skip
            function = option(function)
    return function


def overrides_from(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(fields given on the command line, field -> flag typed); unset flags are left out."""
    found, typed = {}, {}
    for field in _VALUE_FIELDS:
        for index, flag in enumerate(_flags(field)):
            value = options.get(_param(field, index))
            if value is None:
                continue
            if field in found:
                raise InputError(COMMAND_LINE, flag, f"give {typed[field]} or {flag}, not both")
            found[field], typed[field] = value, flag
    found |= {f: options[f] for f in _BOOL_FIELDS if options.get(f) is not None}
    for field in _LIST_FIELDS:
        if options.get(field):
            found[field] = list(options[field])
    if found.get("train_overrides"):
        check_overrides(found["train_overrides"], COMMAND_LINE, "--set")
    return found, typed


def load_with_flags(path: str, overrides: dict[str, Any], typed: dict[str, str]) -> RunSpec:
    """load_run with the command line's overrides; `--set` extends the file's train_overrides."""
    data, origin = read_run(path)
    overrides = dict(overrides)
    for field in _LIST_FIELDS:
        listed = data.get(field)
        if field in overrides and isinstance(listed, list):
            overrides[field] = [*listed, *overrides[field]]
    return build_spec(data, origin, overrides, typed)


def flag_words(overrides: dict[str, Any], typed: dict[str, str]) -> list[str]:
    """The flags as given (`--pods=4 --preemptible --set=a=b`), for the apps/ file header."""
    words = []
    for field, value in overrides.items():
        flag = typed.get(field) or flag_name(field)
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        else:
            values = value if isinstance(value, list) else [value]
            words += [f"{flag}={shlex.quote(str(v))}" for v in values]
    return words
