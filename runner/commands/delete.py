"""`runner delete RUN`: delete a run's RayJob/RayCluster/Job/Deployment (pods go with them).

    runner delete tiny-lm -n research --yes

A run that ArgoCD applied from apps/ comes back unless its file is removed there too;
the command says so.
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
    run_argument,
)

ARGOCD_MARKS = ("argocd.argoproj.io/instance", "argocd.argoproj.io/tracking-id")


def argocd_managed(objects: list[dict]) -> bool:
    for obj in objects:
        meta = obj["metadata"]
        if any(
            m in meta.get("labels", {}) or m in meta.get("annotations", {}) for m in ARGOCD_MARKS
        ):
            return True
    return False


@click.command("delete", cls=Day2Command)
@run_argument
@namespace_option
@cluster_option
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@kube_errors
def delete(run: str, namespace: str | None, cluster: str | None, yes: bool) -> None:
    """Delete a run and its pods."""
    kube = client(cluster)
    namespace, objects, pods = find_run(kube, namespace, run)
    names = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects) or "its pods"
    if not yes:
        click.confirm(f"Delete run {run} in {namespace} ({names})?", abort=True)
    gone = kube.delete_run(namespace, run)
    if not objects:  # stray pods only: delete them one by one
        for pod in pods:
            kube.delete("v1", "Pod", namespace, pod["metadata"]["name"])
            gone.append(pod)
    for obj in gone:
        click.echo(f"deleted {obj['kind']}/{obj['metadata']['name']}")
    if argocd_managed(objects):
        click.echo(
            f"note: ArgoCD manages run {run}; remove its file under apps/ or it will be recreated",
            err=True,
        )
