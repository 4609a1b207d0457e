"""Value checks of a composed driver config that its types cannot express.

`check_values(cfg, source)` runs at composition (`driver.config.compose.validate`), before Ray
starts, so a bad value is exit 2 with one line naming the file and the key, never a crash
bundle a minute later. The rules are tables: counts that must be at least 1, floats that
must be finite and within a range, names that travel as labels and path parts, and the
optimizer's betas.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from catalog.errors import InputError

# A run's name and team become Kubernetes labels, folder names and checkpoint path parts.
SAFE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# Model and data fields that must be at least 1 when the config has them.
_COUNTS = (
    "model.d_model",
    "model.n_layers",
    "model.n_heads",
    "model.mlp_ratio",
    "model.patch_size",
    "data.seq_len",
    "data.image_size",
    "data.channels",
)
# (key, lowest, highest, lowest allowed itself?): finite floats within a range.
_FLOATS = (
    ("optimizer.lr", 0.0, math.inf, False),
    ("optimizer.eps", 0.0, math.inf, False),
    ("optimizer.weight_decay", 0.0, math.inf, True),
    ("optimizer.min_lr_ratio", 0.0, 1.0, True),
    ("train.max_grad_norm", 0.0, math.inf, True),
    ("parallelism.cpus_per_worker", 0.0, math.inf, False),
    ("debug.hold_replacement_s", 0.0, math.inf, True),
    ("debug.hold_start_s", 0.0, math.inf, True),
    ("debug.slow_save_s", 0.0, math.inf, True),
)
_NON_NEGATIVE = ("run.local_cpus", "logging.tail_lines", "debug.flight_recorder_entries")
_NAMES = ("run.name", "run.team", "run.cluster")
_MISSING = object()


def check_values(cfg: object, source: str | Path | None) -> None:
    """Raise InputError for the first value outside its rule."""
    for key in _NAMES:
        check_name(key, _get(cfg, key), source)
    for key in _COUNTS:
        value = _get(cfg, key)
        if value is not _MISSING and value < 1:
            raise InputError(source, key, "must be at least 1")
    for key in _NON_NEGATIVE:
        if _get(cfg, key) < 0:
            raise InputError(source, key, "must not be negative")
    for key, low, high, closed in _FLOATS:
        problem = float_problem(_get(cfg, key), low, high, closed)
        if problem:
            raise InputError(source, key, problem)
    check_betas(_get(cfg, "optimizer.betas"), source)


def check_name(key: str, value: str, source: str | Path | None) -> None:
    """Lower-case letters, digits and inner dashes, at most 63 characters (a DNS label)."""
    if not SAFE_NAME.match(value or ""):
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise InputError(
            source, key, f"{shown!r} is not a safe name (a-z, 0-9 and inner '-', 1-63 chars)"
        )


def float_problem(value: float, low: float, high: float, closed: bool) -> str | None:
    """Why `value` is not a finite number in [low, high] (or (low, high]), or None."""
    if not math.isfinite(value):
        return f"must be a finite number, not {value}"
    if value < low or (value == low and not closed):
        return f"must be {'at least' if closed else 'greater than'} {low:g}"
    if value > high:
        return f"must be at most {high:g}"
    return None


def check_betas(betas: list[float], source: str | Path | None) -> None:
    if len(betas) != 2:
        raise InputError(source, "optimizer.betas", f"needs 2 values, not {len(betas)}")
    for i, beta in enumerate(betas):
        problem = float_problem(beta, 0.0, 1.0, True)
        if problem or beta == 1.0:
            raise InputError(source, f"optimizer.betas[{i}]", "must be in [0, 1)")


def _get(cfg: object, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part, _MISSING)
        if cfg is _MISSING:
            return _MISSING
    return cfg
