"""How the day-2 commands show runs: kubectl-style ages, aligned tables, YAML/JSON output,
one word for an object's state, a run's summary and a pod's row. Pure functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from catalog import labels
from runner.commands._day2 import role


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl-style age: 45s, 12m, 3h, 2d."""
    if not timestamp:
        return "-"
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        click.echo("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def emit(data: Any, output: str, table: Callable[[], None]) -> None:
    """Print `data` as YAML or JSON, or call `table` for the table format."""
    if output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    elif output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip())
    else:
        table()


def state_of(obj: dict) -> str:
    """One word for an object's state, from its status as its controller writes it."""
    kind, status, spec = obj["kind"], obj.get("status") or {}, obj.get("spec") or {}
    if kind == "RayJob":
        return (
            status.get("jobDeploymentStatus")
            or status.get("jobStatus")
            or ("Suspended" if spec.get("suspend") else "Pending")
        )
    if kind == "RayCluster":
        return status.get("state") or ("Suspended" if spec.get("suspend") else "Pending")
    if kind == "Job":
        for condition in status.get("conditions") or []:
            if condition.get("status") == "True" and condition.get("type") in (
                "Complete",
                "Failed",
            ):
                return condition["type"]
        if spec.get("suspend"):
            return "Suspended"
        return "Running" if status.get("active") else "Pending"
    if kind == "Deployment":
        return f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)} ready"
    return "-"


def summary(run: str, objects: list[dict], pods: list[dict]) -> dict:
    """The run at a glance: identity labels, main object and state, pod counts."""
    main = objects[0] if objects else pods[0]
    meta = main["metadata"]
    tags = meta.get("labels", {})
    running = sum(p.get("status", {}).get("phase") == "Running" for p in pods)
    return {
        "run": run,
        "namespace": meta.get("namespace", ""),
        "team": tags.get(labels.TEAM, ""),
        "cluster": tags.get(labels.CLUSTER, ""),
        "type": tags.get(labels.TYPE, main["kind"].lower()),
        "kind": main["kind"],
        "name": meta["name"],
        "state": state_of(main) if objects else "-",
        "pods": f"{running}/{len(pods)}",
        "created": meta.get("creationTimestamp"),
    }


def pod_row(pod: dict) -> dict:
    meta, status = pod["metadata"], pod.get("status") or {}
    restarts = sum(c.get("restartCount", 0) for c in status.get("containerStatuses") or [])
    return {
        "pod": meta["name"],
        "role": role(pod),
        "phase": status.get("phase", "Unknown"),
        "node": pod.get("spec", {}).get("nodeName", ""),
        "restarts": restarts,
        "ip": status.get("podIP", ""),
    }
