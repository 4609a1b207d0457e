"""Value checks of the `aux` config section: one-line errors naming `aux.<key>`.

`check_aux(aux)` runs when the composed config becomes a `driver.config.schema.AuxConfig` (its
`__post_init__`); `driver.config.compose.compose` adds the file name. Pure, no imports of Ray,
torch or the handlers' modules (a handler's module is only located, not run).
"""

from __future__ import annotations

import importlib.util
import math
import re

from catalog.errors import InputError
from driver.aux.routing import POLICIES as FULL_POLICIES

PLACEMENTS = ("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK")
DEATH_POLICIES = ("retry", "error")
BACKENDS = ("auto", "gloo", "nccl")
_HANDLER = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_SERVICE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


def check_aux(aux) -> None:
    """Raise InputError for the first bad value of the aux section."""
    for name, service in aux.services.items():
        check_service(name, service)
    for key in ("condition", "evaluate"):
        check_reference(f"aux.{key}", getattr(aux, key), aux.services)
    refresh = aux.refresh
    check_reference("aux.refresh.service", refresh.service, aux.services)
    if refresh.every_steps < 0:
        raise InputError(None, "aux.refresh.every_steps", "must not be negative")
    if refresh.every_steps and not refresh.service:
        raise InputError(None, "aux.refresh.service", "needed when refresh.every_steps > 0")
    if aux.evaluate and (refresh.service != aux.evaluate or not refresh.every_steps):
        raise InputError(
            None, "aux.evaluate", f"scores refreshed weights: needs aux.refresh.service="
            f"{aux.evaluate} and aux.refresh.every_steps > 0 (or aux.evaluate=null)",
        )  # fmt: skip
    if refresh.backend not in BACKENDS:
        raise InputError(None, "aux.refresh.backend", _choice(refresh.backend, BACKENDS))
    positive("aux.refresh.timeout_s", refresh.timeout_s)
    positive("aux.fleet_interval_s", aux.fleet_interval_s)


def check_service(name: str, svc) -> None:
    """One service's fields."""
    key = f"aux.services.{name}"
    if not _SERVICE_NAME.match(name):
        raise InputError(None, key, "service names are a-z, 0-9, '-', '_' (40 chars at most)")
    if not svc.handler:
        raise InputError(None, f"{key}.handler", "required: module:Class of the handler")
    if not _HANDLER.match(svc.handler):
        raise InputError(None, f"{key}.handler", f"{svc.handler[:80]!r} is not module:Class")
    module = svc.handler.partition(":")[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        found = False
    if not found:
        raise InputError(None, f"{key}.handler", f"no module {module}")
    if not math.isfinite(svc.gpus_per_worker) or svc.gpus_per_worker < 0:
        raise InputError(None, f"{key}.gpus_per_worker", "must be a number >= 0")
    positive(f"{key}.cpus_per_worker", svc.cpus_per_worker)
    for field in ("train_workers_per_worker",):
        if getattr(svc, field) < 0:
            raise InputError(None, f"{key}.{field}", "must not be negative")
    for field in ("min_replicas", "queue_bound"):
        if getattr(svc, field) < 1:
            raise InputError(None, f"{key}.{field}", "must be at least 1")
    if svc.max_restarts < -1:
        raise InputError(None, f"{key}.max_restarts", "must be -1 (always) or >= 0")
    positive(f"{key}.ready_timeout_s", svc.ready_timeout_s)
    positive(f"{key}.deadline_s", svc.deadline_s)
    for field, allowed in (
        ("placement", PLACEMENTS),
        ("full_policy", FULL_POLICIES),
        ("on_worker_death", DEATH_POLICIES),
    ):
        if getattr(svc, field) not in allowed:
            raise InputError(None, f"{key}.{field}", _choice(getattr(svc, field), allowed))


def check_reference(key: str, name: str | None, services: dict) -> None:
    """`name`, when set, must be one of the configured services."""
    if name is not None and name not in services:
        known = ", ".join(sorted(services)) or "none configured"
        raise InputError(None, key, f"no service {name!r} in aux.services ({known})")


def positive(key: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise InputError(None, key, f"must be a positive number, not {value}")


def _choice(value, allowed: tuple) -> str:
    return f"{value!r} is not one of {', '.join(allowed)}"


def check_run(cfg) -> None:
    """Checks across sections, at launch: `aux.condition` needs a DiT and `data.remote_stage`
    a service."""
    if cfg.aux.condition and cfg.model.kind != "dit":
        raise InputError(None, "aux.condition", f"the {cfg.model.kind} model takes no embeddings")
    check_remote_stage(cfg)


def check_remote_stage(cfg) -> None:
    """`data.remote_stage` names a service."""
    name = cfg.data.remote_stage
    if name is not None:
        check_reference("data.remote_stage", name, cfg.aux.services)
