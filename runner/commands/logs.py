"""`runner logs RUN`: a pod's log: the head's by default, a rank's, or a named pod's.

runner logs tiny-lm --rank 3 --follow
runner logs tiny-lm --pod tiny-lm-head-x7q2 --container ray-head --tail 200
runner logs tiny-lm --all          # every pod, lines prefixed with the pod name
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
    pick_pod,
    run_argument,
)


@click.command("logs", cls=Day2Command)
@run_argument
@namespace_option
@cluster_option
@click.option("-f", "--follow", is_flag=True, help="Stream new lines until the pod stops.")
@click.option("--rank", type=click.IntRange(min=0), help="Worker rank (pod order; Job index).")
@click.option("--pod", help="Pod name.")
@click.option("-c", "--container", help="Container (default: the pod's first).")
@click.option("--tail", type=click.IntRange(min=1), help="Only the last N lines.")
@click.option("-p", "--previous", is_flag=True, help="The previous (crashed) container's log.")
@click.option("--all", "all_pods", is_flag=True, help="Every pod of the run, prefixed.")
@kube_errors
def logs(run, namespace, cluster, follow, rank, pod, container, tail, previous, all_pods) -> None:
    """Print a run's logs."""
    if sum(x is not None and x is not False for x in (rank, pod, all_pods or None)) > 1:
        raise click.UsageError("choose one of --rank, --pod and --all")
    if all_pods and follow:
        raise click.UsageError("--follow works on one pod; use --rank or --pod")
    kube = client(cluster)
    namespace, _, pods = find_run(kube, namespace, run)
    targets = pods if all_pods else [pick_pod(pods, pod, rank, run)]
    for target in targets:
        name = target["metadata"]["name"]
        prefix = f"[{name}] " if all_pods else ""
        for line in kube.logs(namespace, name, container, follow, tail, previous):
            click.echo(f"{prefix}{line}")
