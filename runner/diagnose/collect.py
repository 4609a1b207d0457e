"""A cluster run's evidence, collected into a folder: what `runner diagnose RUN` archives and
`runner diagnose RUN --analyze` reads.

    folder = collect(kube, namespace, run, objects, pods, into, output_dir, tail)
    store_parts(folder, store, team, run, nodes)           # the store's log lines, Warden's history
    bucket_bundles(folder, "gs://reve-ultra-usc1-bundles", team, run)   # kept bundles

The folder holds `summary.json`, `objects.yaml`, `pods.yaml`, `events.yaml`, each
container's log (`logs/<pod>/<container>[.previous].log`), the crash bundles copied from the
head pod while it lives (`crash/crash-*`), and with a store the run's log lines
(`run-logs.jsonl`, platform.run_logs) and its nodes' events (`warden.json`,
platform.node_events: Warden's actions, Xids), and the bundles kept in the run's bucket
after the pods are gone (`bundles/crash-*`, signed manifests checked by the analysis).
Every cluster-given name is made a safe path component first.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from pathlib import Path, PurePosixPath

import yaml

from runner.kube import KubeError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
RUN_LOG_LIMIT = 200_000
NODE_EVENTS = """
SELECT toUnixTimestamp64Milli(ts) / 1000 AS ts, node, source, kind, severity, reason, message
FROM platform.node_events
WHERE node IN {nodes:Array(String)} AND ts > now() - INTERVAL {days:UInt32} DAY
ORDER BY ts LIMIT 5000"""
RUN_LOGS = """
SELECT toUnixTimestamp64Micro(ts) / 1e6 AS ts, cluster, team, run, learner, attempt, rank, pod,
       node, worker, service, source, logger, level, line
FROM platform.run_logs WHERE team = {team:String} AND run = {run:String}
ORDER BY ts LIMIT {limit:UInt32}"""


def safe_name(text: str) -> str:
    """One archive path component from a cluster-given name (pod, container, run): no
    folder separators, no leading dots, no control characters."""
    cleaned = _UNSAFE.sub("_", text).lstrip(".")
    return cleaned[:200] or "_"


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


def write(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def collect(
    kube,
    namespace: str,
    run: str,
    info: dict,
    objects: list[dict],
    pods: list[dict],
    folder: Path,
    output_dir: str,
    tail: int,
    source_pod: str | None,
) -> list[str]:
    """Write the run's objects, pods, events, container logs and crash bundles into
    `folder`; returns notes (what could not be collected)."""
    names = {o["metadata"]["name"] for o in objects + pods}
    events = [e for e in kube.events(namespace) if e.get("involvedObject", {}).get("name") in names]
    write(folder, "summary.json", json.dumps(info, indent=2, default=str))
    write(folder, "objects.yaml", yaml.safe_dump_all(objects, sort_keys=False))
    write(folder, "pods.yaml", yaml.safe_dump_all(pods, sort_keys=False))
    write(folder, "events.yaml", yaml.safe_dump_all(events, sort_keys=False))
    for pod in pods:
        for name, text in pod_logs(kube, namespace, pod, tail).items():
            write(folder, name, text)
    notes = []
    if source_pod is None:
        return ["no pods: crash bundles not collected"]
    (folder / "crash").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        try:
            copied = crash_bundles(kube, namespace, source_pod, output_dir, Path(scratch))
            notes.append(f"crash bundles from {source_pod}:{output_dir}: {len(copied)}")
        except KubeError as err:
            notes.append(f"crash bundles not collected: {err}")
        for item in sorted(Path(scratch).iterdir()):
            item.rename(folder / "crash" / item.name)
    return notes


def store_parts(folder: Path, store, team: str, run: str, nodes: list[str]) -> list[str]:
    """The run's log lines and its nodes' events from the store (ClickHouse); notes."""
    notes = []
    try:
        rows = store.query(RUN_LOGS, {"team": team, "run": run, "limit": RUN_LOG_LIMIT})
        write(folder, "run-logs.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        notes.append(f"log lines from the store: {len(rows)}")
    except Exception as err:
        notes.append(f"log lines not read from the store: {err}")
    if nodes:
        from observability.log_search import array_param

        try:
            rows = store.query(NODE_EVENTS, {"nodes": array_param(nodes), "days": 14})
            history: dict[str, list] = {}
            for row in rows:
                history.setdefault(row["node"], []).append(row)
            write(folder, "warden.json", json.dumps(history, indent=1))
        except Exception as err:
            notes.append(f"node history not read: {err}")
    return notes


def bucket_bundles(folder: Path, root: str, team: str, run: str, keep: int = 3) -> list[str]:
    """Copy the run's newest `keep` bundles from `<root>/<team>/<run>/` into `bundles/`."""
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(f"{root.rstrip('/')}/{team}/{run}")
        names = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path))
    except Exception as err:  # no fsspec, no credentials, no such prefix
        return [f"bundles in {root} not read: {type(err).__name__}: {str(err)[:200]}"]
    found = [n for n in names if n.startswith("crash-")][-keep:]
    for name in found:
        dest = folder / "bundles" / safe_name(name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fs.get(f"{path}/{name}", str(dest), recursive=True)
    return [f"bundles from {root}/{team}/{run}: {len(found)}"]
