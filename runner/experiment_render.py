"""A DiLoCo experiment's learners rendered: each learner's RayJob (`runner.render`, checked
like every run) with its `diloco.*` settings as overrides of its driver command (so they
are in the run's config.yaml), carrying the experiment and learner labels; and the pieces
the synchronizer's rendering shares (`Part`, `add_identity`, `secret_refs`, `relabel`).
Curve keys reach pods as `secretKeyRef`s in `REVE_DILOCO_*` variables, never as values.
The synchronizer: `runner.experiment_sync`; the public face: `runner.experiment`
(docs/diloco.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from catalog import labels
from catalog.errors import InputError
from runner.experiment_spec import (
    DRIVER_SECTION,
    EXPERIMENT_LABEL,
    KEY_ENV,
    LEARNER_LABEL,
    Experiment,
    Learner,
    secret_name,
    shared_fields,
    sync_address,
)
from runner.runfile import shown


def secret_refs(exp: Experiment, owner: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """`REVE_DILOCO_<KEY>` entries that read `owner`'s keys from its Secret."""
    secret = secret_name(exp, owner)
    return {
        f"{KEY_ENV}{k.upper().replace('-', '_')}": {"secretKeyRef": {"name": secret, "key": k}}
        for k in keys
    }


def learner_overrides(exp: Experiment, learner: Learner) -> list[str]:
    """The learner's `diloco.*` driver overrides (the driver's `diloco` section:
    driver/config/diloco.py); its keys stay out, in `learner_env`'s Secret references."""
    d = exp.diloco
    values = {
        "address": sync_address(exp, learner.cluster),
        "learner": learner.name,
        "index": exp.learners.index(learner),  # its data shard of the experiment's learners
        "learners": len(exp.learners),
        "sync_every": d.sync_every,
        "mode": d.mode,
        "merge": d.merge,
        "compression": d.compression,
        "barrier_timeout_s": d.barrier_timeout_s,
        "fragments": d.fragments,
    }
    return [f"{DRIVER_SECTION}.{key}={value}" for key, value in values.items()]


def learner_env(exp: Experiment, learner: Learner) -> dict[str, Any]:
    """The learner's Curve keys, as references to its Secret (`REVE_DILOCO_PUBLIC_KEY`,
    `_SECRET_KEY`, `_SERVER_KEY`: the names the driver's `diloco.keys_env_prefix` reads)."""
    return secret_refs(exp, learner.name, ("public-key", "secret-key", "server-key"))


def learner_data(exp: Experiment, learner: Learner) -> dict[str, Any]:
    """The run definition of one learner: shared fields, its own on top, its `diloco.*`
    overrides last (the experiment's block decides them) and its key references. Its
    `train_overrides` follow the shared ones and its `env` entries win over them; either
    of another kind than a list or a mapping is an InputError naming where it is."""
    base, own = shared_fields(exp), dict(learner.model_extra or {})
    data = {
        **base,
        **own,
        "name": f"{exp.name}-{learner.name}",
        "type": "rayjob",
        "cluster": learner.cluster,
    }
    mine = f"learners[{exp.learners.index(learner)}]"
    overrides = [_part(exp, base, "train_overrides", list, ""),
                 _part(exp, own, "train_overrides", list, mine)]  # fmt: skip
    overrides.append(learner_overrides(exp, learner))
    data["train_overrides"] = [item for part in overrides for item in part]
    env = (_part(exp, base, "env", dict, ""), _part(exp, own, "env", dict, mine))
    data["env"] = {**env[0], **env[1], **learner_env(exp, learner)}
    return data


def _part(exp: Experiment, fields: dict, key: str, kind: type, prefix: str) -> Any:
    """`fields[key]` when it is a `kind` (empty when absent), else an InputError."""
    value = fields.get(key)
    if value is None and key not in fields:
        return kind()
    if not isinstance(value, kind):
        what = "a list of key=value" if kind is list else "a mapping of NAME: value"
        field = f"{prefix}.{key}" if prefix else key
        raise InputError(exp._origin, field, f"must be {what}, not {shown(value)}")
    return value


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


def relabel(err: InputError, exp: Experiment, prefix: str, own: set[str]) -> InputError:
    """An error in a part's own fields, renamed to where they sit in the experiment file."""
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
    notices: tuple[str, ...] = ()


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
        raise relabel(err, exp, f"learners[{index}]", set(learner.model_extra or {})) from None


def render_learner(exp: Experiment, index: int) -> Part:
    from runner.render import render

    learner = exp.learners[index]
    own = set(learner.model_extra or {})
    spec = learner_spec(exp, index)
    try:
        rendered = render(spec)
    except InputError as err:
        raise relabel(err, exp, f"learners[{index}]", own) from None
    identity = {EXPERIMENT_LABEL: exp.name, LEARNER_LABEL: learner.name}
    manifests = add_identity(rendered.manifests, identity)
    notices = tuple(relabel_notice(n, exp, index, own) for n in rendered.notices)
    return Part(learner.name, learner.cluster, manifests, rendered.summary(), notices)


def relabel_notice(line: str, exp: Experiment, index: int, own: set[str]) -> str:
    """A learner's notice about its image, naming where the image is set in the file."""
    if "image" in own and line.startswith(f"{exp._origin}: image: "):
        return line.replace(": image: ", f": learners[{index}].image: ", 1)
    return line
