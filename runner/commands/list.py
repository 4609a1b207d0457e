"""`runner list`: the runs on a cluster, one line each (from their identity labels).

runner list --cluster ultra-usc1 -n research -o json
"""

from __future__ import annotations

import click

from catalog import labels
from runner.commands._day2 import (
    Day2Command,
    client,
    cluster_option,
    kube_errors,
    namespace_option,
    output_option,
)
from runner.commands._day2_views import age, emit, print_table, summary
from runner.kube.ops import RUN_KINDS


def collect(kube, namespace: str | None) -> list[dict]:
    """Summaries of every run managed by runner in `namespace` (all when None)."""
    from runner.kube import NotFound

    mine = {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}
    objects: dict[tuple[str, str], list[dict]] = {}
    for api_version, kind in RUN_KINDS:
        try:
            found = kube.list(api_version, kind, namespace, mine)
        except NotFound:
            continue
        for obj in found:
            run = obj["metadata"].get("labels", {}).get(labels.RUN)
            if run:
                key = (obj["metadata"].get("namespace", ""), run)
                objects.setdefault(key, []).append(obj)
    pods: dict[tuple[str, str], list[dict]] = {}
    for pod in kube.list("v1", "Pod", namespace, mine):
        run = pod["metadata"].get("labels", {}).get(labels.RUN)
        if run:
            pods.setdefault((pod["metadata"].get("namespace", ""), run), []).append(pod)
    return [
        summary(run, objects.get((ns, run), []), pods.get((ns, run), []))
        for ns, run in sorted(set(objects) | set(pods))
    ]


@click.command("list", cls=Day2Command)
@namespace_option
@cluster_option
@output_option
@kube_errors
def list_runs(namespace: str | None, cluster: str | None, output: str) -> None:
    """List runs (RayJobs, RayClusters, Jobs) with their state and pods."""
    runs = collect(client(cluster), namespace)

    def table() -> None:
        if not runs:
            click.echo("no runs found", err=True)
            return
        print_table(
            ["NAMESPACE", "RUN", "TEAM", "TYPE", "STATE", "PODS", "AGE"],
            [
                [
                    r["namespace"],
                    r["run"],
                    r["team"],
                    r["type"],
                    r["state"],
                    r["pods"],
                    age(r["created"]),
                ]
                for r in runs
            ],
        )

    emit(runs, output, table)
