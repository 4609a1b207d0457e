"""`runner cp SRC DST`: copy files and folders to and from pods (tar over exec).

    runner cp tiny-lm-head-x7q2:outputs/research/tiny-lm/metrics.jsonl ./metrics.jsonl
    runner cp ./patch.py tiny-lm-worker-0:/tmp/patch.py -n research

One side is `POD:PATH`; a path starting with `/`, `./` or `../` is always local.
"""

from __future__ import annotations

from pathlib import Path

import click

from runner.commands._day2 import (
    Day2Command,
    NotFoundError,
    client,
    cluster_option,
    kube_errors,
    namespace_option,
)


def split_remote(arg: str) -> tuple[str, str] | None:
    """`pod:path` -> (pod, path); None for a local path."""
    if arg.startswith(("/", "./", "../")) or ":" not in arg:
        return None
    pod, _, path = arg.partition(":")
    if not pod or not path:
        raise click.UsageError(f"{arg!r}: expected POD:PATH")
    return pod, path


def find_pod(kube, namespace: str | None, name: str) -> str:
    """The namespace of pod `name` (searching all when none is given); exit 4 if absent."""
    matches = [p for p in kube.list("v1", "Pod", namespace) if p["metadata"]["name"] == name]
    if not matches:
        raise NotFoundError(f"pod {name!r} not found")
    spaces = sorted({p["metadata"].get("namespace", "") for p in matches})
    if len(spaces) > 1:
        raise click.UsageError(f"pod {name!r} exists in {', '.join(spaces)}; pick one with -n")
    return spaces[0]


@click.command("cp", cls=Day2Command)
@click.argument("source")
@click.argument("destination")
@namespace_option
@cluster_option
@click.option("-c", "--container", help="Container (default: the pod's first).")
@kube_errors
def cp(source, destination, namespace, cluster, container) -> None:
    """Copy files between this machine and a pod."""
    src, dst = split_remote(source), split_remote(destination)
    if (src is None) == (dst is None):
        raise click.UsageError("exactly one of SOURCE and DESTINATION must be POD:PATH")
    kube = client(cluster)
    if src is not None:
        pod, path = src
        kube.copy_from(find_pod(kube, namespace, pod), pod, path, Path(destination), container)
        click.echo(f"copied {source} -> {destination}")
    else:
        pod, path = dst
        local = Path(source)
        if not local.exists():
            raise click.UsageError(f"{source}: no such file or folder")
        kube.copy_to(find_pod(kube, namespace, pod), pod, local, path, container)
        click.echo(f"copied {source} -> {destination}")
