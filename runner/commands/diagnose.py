"""`runner diagnose RUN`: one tar.gz with everything needed to debug a run.

It holds the run's objects, pods and events (YAML), each container's log (and the
previous one after a restart), and the driver's crash bundles (`<output_dir>/crash-*`)
copied from the head pod (or rank 0 of a Job).

    runner diagnose tiny-lm -n research --out /tmp/tiny-lm.tar.gz
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath

import click
import yaml

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
from runner.commands._day2_views import summary
from runner.commands._types import PathArg
from runner.kube import KubeError

LOG_TAIL = 5000
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def pod_logs(kube, namespace: str, pod: dict, tail: int) -> dict[str, str]:
    """`logs/<pod>/<container>[.previous].log` -> text, for every container."""
    name = safe_name(pod["metadata"]["name"])
    statuses = {s["name"]: s for s in pod.get("status", {}).get("containerStatuses") or []}
    out = {}
    containers = pod.get("spec", {}).get("initContainers", []) + pod["spec"]["containers"]
    pod_name = pod["metadata"]["name"]
    for container in (c["name"] for c in containers):
        base = f"logs/{name}/{safe_name(container)}"
        try:
            out[f"{base}.log"] = "\n".join(kube.logs(namespace, pod_name, container, tail=tail))
        except KubeError as err:
            out[f"{base}.log"] = f"(logs unavailable: {err})"
        if statuses.get(container, {}).get("restartCount", 0):
            try:
                lines = kube.logs(namespace, pod_name, container, tail=tail, previous=True)
                out[f"{base}.previous.log"] = "\n".join(lines)
            except KubeError as err:
                out[f"{base}.previous.log"] = f"(unavailable: {err})"
    return out


def crash_bundles(kube, namespace: str, pod: str, output_dir: str, into: Path) -> list[str]:
    """Copy `<output_dir>/crash-*` from the pod into `into`; returns what was copied.

    `output_dir` reaches the pod's shell quoted (`shlex.quote`); only the `crash-*` glob is
    left to the shell, and the names come back NUL-separated, so no name is split or run.
    """
    folder = shlex.quote(output_dir.rstrip("/") or "/")
    script = f'for f in {folder}/crash-*; do [ -e "$f" ] && printf \'%s\\0\' "$f"; done; true'
    listing = kube.exec(namespace, pod, ["sh", "-c", script])
    copied = []
    for remote in listing.stdout.decode(errors="replace").split("\0"):
        name = PurePosixPath(remote).name
        if not name.startswith("crash-"):
            continue
        kube.copy_from(namespace, pod, remote, into / safe_name(name))
        copied.append(remote)
    return copied


def safe_name(text: str) -> str:
    """One archive path component from a cluster-given name (pod, container, run): no
    folder separators, no leading dots, no control characters."""
    cleaned = _UNSAFE.sub("_", text).lstrip(".")
    return cleaned[:200] or "_"


def _add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), int(time.time())
    tar.addfile(info, io.BytesIO(data))


@click.command("diagnose", cls=Day2Command)
@run_argument
@namespace_option
@cluster_option
@click.option(
    "--out",
    "out",
    type=PathArg(dir_okay=False, path_type=Path),
    help="Archive path (default ./<run>-diagnose-<time>.tar.gz).",
)
@click.option(
    "--output-dir", help="The run's output dir in the pod (default outputs/<team>/<run>)."
)
@click.option(
    "--tail",
    type=click.IntRange(min=1),
    default=LOG_TAIL,
    show_default=True,
    help="Log lines per container.",
)
@kube_errors
def diagnose(run, namespace, cluster, out, output_dir, tail) -> None:
    """Collect a run's crash bundle, logs, pods and events into one tar.gz."""
    kube = client(cluster)
    namespace, objects, pods = find_run(kube, namespace, run)
    info = summary(run, objects, pods)
    output_dir = output_dir or f"outputs/{info['team'] or namespace}/{run}"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = out or Path(f"{safe_name(run)}-diagnose-{stamp}.tar.gz")
    root = f"{safe_name(run)}-diagnose-{stamp}"
    names = {o["metadata"]["name"] for o in objects + pods}
    events = [e for e in kube.events(namespace) if e.get("involvedObject", {}).get("name") in names]
    notes = []
    with tarfile.open(out, "w:gz") as tar:
        _add(tar, f"{root}/summary.json", json.dumps(info, indent=2, default=str))
        _add(tar, f"{root}/objects.yaml", yaml.safe_dump_all(objects, sort_keys=False))
        _add(tar, f"{root}/pods.yaml", yaml.safe_dump_all(pods, sort_keys=False))
        _add(tar, f"{root}/events.yaml", yaml.safe_dump_all(events, sort_keys=False))
        for pod in pods:
            for name, text in pod_logs(kube, namespace, pod, tail).items():
                _add(tar, f"{root}/{name}", text)
        if pods:
            source = pick_pod(pods, None, None, run)["metadata"]["name"]
            with tempfile.TemporaryDirectory() as scratch:
                try:
                    copied = crash_bundles(kube, namespace, source, output_dir, Path(scratch))
                    notes.append(f"crash bundles from {source}:{output_dir}: {len(copied)}")
                except KubeError as err:
                    notes.append(f"crash bundles not collected: {err}")
                for folder in sorted(Path(scratch).iterdir()):
                    tar.add(str(folder), arcname=f"{root}/crash/{folder.name}")
        else:
            notes.append("no pods: crash bundles not collected")
        _add(tar, f"{root}/NOTES.txt", "\n".join(notes) + "\n")
    click.echo(f"wrote {out} ({len(pods)} pods, {len(events)} events; {'; '.join(notes)})")
