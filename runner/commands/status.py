"""`runner status RUN`: the run's state and its pods (role, phase, node, restarts).

runner status tiny-lm -n research
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
from runner.commands._day2_views import age, emit, pod_row, print_table, summary


@click.command("status", cls=Day2Command)
@run_argument
@namespace_option
@cluster_option
@output_option
@kube_errors
def status(run: str, namespace: str | None, cluster: str | None, output: str) -> None:
    """Show a run's state and its pods."""
    kube = client(cluster)
    namespace, objects, pods = find_run(kube, namespace, run)
    data = {**summary(run, objects, pods), "pods": [pod_row(p) for p in pods]}

    def table() -> None:
        click.echo(
            f"run {run} in {namespace}: {data['kind']} {data['name']} "
            f"{data['state']} (age {age(data['created'])})"
        )
        if pods:
            print_table(
                ["POD", "ROLE", "PHASE", "NODE", "RESTARTS"],
                [
                    [p["pod"], p["role"], p["phase"], p["node"] or "-", p["restarts"]]
                    for p in data["pods"]
                ],
            )
        else:
            click.echo("no pods yet")

    emit(data, output, table)
