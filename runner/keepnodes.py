"""Keeping a RayJob's nodes for its namespace after the run ends (`keep_nodes: 30m`).

The names and the duration format both sides share: `runner render` marks the worker pods of
a RayJob that asks for it; Warden (`warden.keep`) watches the nodes those pods run on and,
once the pods are gone, taints and labels the nodes for the namespace until the time is up.
Every GPU pod runner renders tolerates its own namespace's taint and prefers those nodes, so
a relaunch in the namespace lands on the same, already-warm nodes and nobody else's does.

    from runner.keepnodes import parse_duration
    parse_duration("1h30m")  # 5400

Pure and light (no pydantic): Warden imports it too.
"""

from __future__ import annotations

import re

from catalog.labels import DOMAIN

POD_LABEL = f"{DOMAIN}/keep-nodes"
"""Label on pods that ask for their nodes to be kept (value `true`), so Warden lists them."""
POD_SECONDS = f"{DOMAIN}/keep-nodes-seconds"
"""Annotation on those pods: how long to keep the nodes after the pods are gone."""
KEPT_FOR = f"{DOMAIN}/kept-for"
"""Taint (NoSchedule) and label Warden puts on a kept node; the value is the namespace."""
MIN_SECONDS = 60
MAX_SECONDS = 24 * 3600
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int:
    """Seconds of `30m`, `2h`, `1h30m`, `90s`; ValueError with a short reason otherwise."""
    match = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if not match or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration (e.g. 30m, 2h, 1h30m)")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def check_seconds(seconds: int) -> None:
    """ValueError when a keep time is outside what Warden honours."""
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise ValueError(f"{seconds}s is outside 1m to 24h")


def toleration(namespace: str) -> dict[str, str]:
    """Every GPU pod of `namespace` tolerates the nodes kept for that namespace."""
    return {"key": KEPT_FOR, "value": namespace, "effect": "NoSchedule"}


def preference(namespace: str) -> dict:
    """A preferred node affinity term for the nodes kept for `namespace`."""
    expression = {"key": KEPT_FOR, "operator": "In", "values": [namespace]}
    return {"weight": 100, "preference": {"matchExpressions": [expression]}}


def taint(namespace: str) -> dict[str, str]:
    """The taint Warden puts on a node kept for `namespace`."""
    return toleration(namespace)
