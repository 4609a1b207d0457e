"""Compose a run's driver config: shipped groups + the run's YAML + `key=value` overrides.

`compose("runs/train/tiny-lm.yaml", ["train.steps=20"])` returns the typed `TrainConfig` and
its YAML text. Hydra does the composition (the run YAML's defaults list picks one option per
group from `driver/conf/`); the structured schemas in `driver.config.schema` reject unknown keys and
wrong types. Every problem is a `catalog.InputError` naming the file and the key.
"""

from __future__ import annotations

import os
from pathlib import Path

from catalog.errors import InputError
from driver.config import layout
from driver.config.checks import check_values
from driver.config.errors import check_overrides, one_line
from driver.config.schema import TrainConfig, register

CONF_DIR = Path(__file__).parents[1] / "conf"
_CHOICES = {
    "train.precision": ("auto", "bf16", "fp32"),
    "optimizer.name": ("adamw",),
    "optimizer.schedule": ("cosine", "constant"),
    "parallelism.device": ("auto", "cpu", "gpu"),
    "parallelism.backend": ("auto", "gloo", "nccl"),
    "logging.format": ("auto", "progress", "json"),
    "data.loader": ("auto", "inprocess", "pipeline"),
    "debug.kill_phase": ("before", "during", "after"),
}
_POSITIVE = (
    "train.steps",
    "train.micro_batch_size",
    "train.grad_accum_steps",
    "parallelism.fsdp_size",
    "data.size",
    "data.producers",
    "data.collators",
    "data.work_queue_size",
    "data.sample_queue_size",
)


def compose(path: str | Path, overrides: list[str] | None = None) -> tuple[TrainConfig, str]:
    """The typed config and its YAML text; raises InputError on any problem."""
    from omegaconf import OmegaConf

    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, "config file not found")
    overrides = list(overrides or [])
    check_overrides(path, overrides)
    cfg = _hydra_compose(path, group_overrides(path, overrides))
    try:
        obj: TrainConfig = OmegaConf.to_object(cfg)
    except InputError as err:  # a component's own check (__post_init__)
        raise InputError(path, err.field, err.message) from None
    except Exception as err:  # a missing mandatory value surfaces here
        raise one_line(path, err) from None
    if not isinstance(obj, TrainConfig):
        raise InputError(path, "defaults", "not a driver config: list train_schema first")
    extra = _extra_key(
        OmegaConf.to_container(cfg), OmegaConf.to_container(OmegaConf.structured(obj))
    )
    if extra:
        raise InputError(path, extra, "unknown key")
    layout.check_shape(obj.shape, path)
    fill_defaults(obj)
    validate(obj, path)
    return obj, OmegaConf.to_yaml(OmegaConf.structured(obj))


OPTIONAL_GROUPS = ("ft",)
"""Groups a run's defaults list may leave out (the schema's defaults apply): `ft=on` then
adds the group, as `+ft=on` would."""


def group_overrides(path: Path, overrides: list[str]) -> list[str]:
    """`group=option` for an optional group the run's defaults list lacks -> `+group=option`."""
    import yaml

    try:
        defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
    except Exception:  # Hydra reports the broken file itself
        return overrides
    listed = {key for item in defaults if isinstance(item, dict) for key in item}
    return [
        f"+{text}"
        if text.split("=", 1)[0] in OPTIONAL_GROUPS and text.split("=", 1)[0] not in listed
        else text
        for text in overrides
    ]


def _hydra_compose(path: Path, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register()
    GlobalHydra.instance().clear()
    searchpath = f"hydra.searchpath=[file://{CONF_DIR}]"
    try:
        with initialize_config_dir(config_dir=str(path.resolve().parent), version_base="1.3"):
            return hydra_compose(config_name=path.stem, overrides=[searchpath, *overrides])
    except Exception as err:
        raise one_line(path, err) from None
    finally:
        GlobalHydra.instance().clear()


def _extra_key(composed: object, typed: object, prefix: str = "") -> str | None:
    """The first key present in the composed config but absent from the schema (`+key=...`)."""
    if not isinstance(composed, dict) or not isinstance(typed, dict):
        return None
    for key, value in composed.items():
        dotted = f"{prefix}{key}"
        if key not in typed:
            return dotted
        found = _extra_key(value, typed[key], dotted + ".")
        if found:
            return found
    return None


def fill_defaults(cfg: TrainConfig, cwd: str | Path | None = None) -> None:
    """Values derived from others: the output folder, the parallel layout from the shape
    (driver.config.layout), the data loader (the pipeline with a shape), and every
    local path the run writes or resumes from (`run.output_dir`, `checkpoint.root`, a
    `checkpoint.resume` path) made absolute against `cwd` (default: this process's working
    directory, the one the user ran from). Ray runs the workers in folders of its own, where
    a relative path would name another place than the driver's."""
    if not cfg.run.output_dir:
        cfg.run.output_dir = f"outputs/{cfg.run.team}/{cfg.run.name}"
    here = Path(cwd) if cwd is not None else Path.cwd()
    cfg.run.output_dir = absolute(cfg.run.output_dir, here)
    cfg.checkpoint.root = absolute(cfg.checkpoint.root, here)
    if cfg.checkpoint.resume not in (None, "auto"):
        cfg.checkpoint.resume = absolute(cfg.checkpoint.resume, here)
    layout.derive(cfg.parallelism, cfg.shape)
    if cfg.data.loader == "auto":
        cfg.data.loader = "pipeline" if cfg.shape.nodes else "inprocess"


def absolute(path: str, cwd: Path) -> str:
    """A local path made absolute against `cwd` (lexically: `..` folded, symlinks kept); a
    URI (`gs://...`) or an empty value as it is."""
    if not path or "://" in path:
        return path
    return os.path.normpath(cwd / Path(path).expanduser())


def validate(cfg: TrainConfig, source: str | Path) -> None:
    """Checks the schema cannot express: choices, values, positive counts, divisibility, the
    layout against the shape."""
    check_values(cfg, source)
    layout.check(cfg.parallelism, cfg.shape, source)
    for key, allowed in _CHOICES.items():
        value = _get(cfg, key)
        if value not in allowed:
            raise InputError(source, key, f"{value!r} is not one of {', '.join(allowed)}")
    for key in _POSITIVE:
        if _get(cfg, key) < 1:
            raise InputError(source, key, "must be at least 1")
    par = cfg.parallelism
    if cfg.data.prefetch_batches < 2:
        raise InputError(source, "data.prefetch_batches", "must be at least 2")
    if par.workers is not None and par.workers < 1:
        raise InputError(source, "parallelism.workers", "must be at least 1 (or null)")
    if par.replica_group_size % par.fsdp_size:
        raise InputError(
            source, "parallelism.replica_group_size", "must be a multiple of fsdp_size"
        )
    if cfg.model.d_model % cfg.model.n_heads:
        raise InputError(source, "model.n_heads", "must divide model.d_model")
    pairs = {"lm": "text", "dit": "shapes"}
    if pairs.get(cfg.model.kind) != cfg.data.kind:
        raise InputError(source, "data", f"{cfg.model.kind} model needs {pairs[cfg.model.kind]}")
    if cfg.model.kind == "dit" and cfg.data.image_size % cfg.model.patch_size:
        raise InputError(source, "model.patch_size", "must divide data.image_size")
    check_batch(cfg, par.workers or 1, source)  # again at start, with the planned world
    if cfg.optimizer.warmup_steps < 0:
        raise InputError(source, "optimizer.warmup_steps", "must not be negative")
    check_ft(cfg, source)


def check_ft(cfg, source) -> None:
    """The `ft` section's values, and the layouts torchft runs here (docs/ft.md)."""
    from dataclasses import asdict

    from driver.config.ft import FtConfig

    cfg.ft = FtConfig.from_dict(asdict(cfg.ft), str(source))
    par = cfg.parallelism
    cfg.ft.check_layout(par.fsdp_size, par.replica_group_size, par.workers, str(source))


def check_batch(cfg, world: int, source: str | None = None) -> None:
    """The dataset must hold one global batch (micro batch x training workers). Checked
    here when `parallelism.workers` fixes the world size, and again by the driver once
    capacity planning has chosen it."""
    need = cfg.train.micro_batch_size * world
    if cfg.data.size < need:
        raise InputError(
            source,
            "data.size",
            f"must hold one global batch ({need} examples: train.micro_batch_size "
            f"{cfg.train.micro_batch_size} x {world} workers)",
        )


def _get(cfg: object, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg
