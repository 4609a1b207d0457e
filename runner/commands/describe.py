"""`runner describe RUN`: the run's objects, pods and recent events, like kubectl describe.

runner describe tiny-lm -n research -o yaml
"""

from __future__ import annotations

import click

from runner.commands._day2 import (
    Day2Command,
    client,
    cluster_option,
    find_run,
    kube_errors,
    namespace_option,
    output_option,
    run_argument,
)
from runner.commands._day2_views import emit, pod_row, print_table, state_of, summary


def gather(kube, namespace: str, run: str, objects: list[dict], pods: list[dict]) -> dict:
    """Everything describe shows, as data."""
    names = {o["metadata"]["name"] for o in objects + pods}
    events = [e for e in kube.events(namespace) if e.get("involvedObject", {}).get("name") in names]
    return {
        "summary": summary(run, objects, pods),
        "objects": objects,
        "pods": pods,
        "events": events,
    }


def event_line(event: dict) -> list[str]:
    involved = event.get("involvedObject", {})
    return [
        event.get("lastTimestamp") or event.get("eventTime") or "-",
        event.get("type", ""),
        event.get("reason", ""),
        f"{involved.get('kind', '')}/{involved.get('name', '')}",
        (event.get("message") or "").replace("\n", " "),
    ]


@click.command("describe", cls=Day2Command)
@run_argument
@namespace_option
@cluster_option
@output_option
@kube_errors
def describe(run: str, namespace: str | None, cluster: str | None, output: str) -> None:
    """Describe a run: objects, pods and events."""
    kube = client(cluster)
    namespace, objects, pods = find_run(kube, namespace, run)
    data = gather(kube, namespace, run, objects, pods)

    def table() -> None:
        s = data["summary"]
        click.echo(
            f"Run:        {run}\nNamespace:  {namespace}\nTeam:       {s['team']}\n"
            f"Cluster:    {s['cluster']}\nType:       {s['type']}"
        )
        click.echo("Objects:")
        for obj in objects:
            click.echo(f"  {obj['kind']}/{obj['metadata']['name']}  {state_of(obj)}")
        click.echo("Pods:")
        rows = [pod_row(p) for p in pods]
        if rows:
            print_table(
                ["  POD", "ROLE", "PHASE", "NODE", "RESTARTS", "IP"],
                [
                    [
                        "  " + r["pod"],
                        r["role"],
                        r["phase"],
                        r["node"] or "-",
                        r["restarts"],
                        r["ip"] or "-",
                    ]
                    for r in rows
                ],
            )
        click.echo("Events:")
        if data["events"]:
            print_table(
                ["  TIME", "TYPE", "REASON", "OBJECT", "MESSAGE"],
                [["  " + c[0], *c[1:]] for c in map(event_line, data["events"])],
            )
        else:
            click.echo("  none")

    emit(data, output, table)
