"""Crash bundles: everything needed to debug a terminal failure, in one folder, kept.

`collect(cfg, config_yaml, error, ranks, driver_lines, hosts)` is what the driver calls when
training fails: it writes `<output_dir>/crash-<timestamp>/` (`write_bundle`), with what every
other node of the run holds (driver.output.crash_gather: flight recorder dumps, log file tails,
kernel log), puts each failed rank's error and traceback into the run's logs (an ERROR line
with the rank's labels, ingested into the run's store), and with `logging.bundle_root`
signs the bundle and copies it to the run's bucket (driver.output.crash_upload).

A bundle holds the composed config, the driver's exception, the exception + traceback +
last log lines of every failed rank (`rank-<r>.txt`), `ranks.json` (every rank's pod, node
and attempt, and the failed ranks' records), the driver's last log lines, the environment
(secrets redacted), package versions, the git revision, the tails of every process's log
file (`logs/`), each node's kernel log where the pod may read it (`nodes/<node>/kernel.log`)
and, when ranks left any, their PyTorch flight recorder dumps (`<output_dir>/flight-recorder/
rank_<r>[.json]` on any node, or a `flight_recorder` snapshot in a failed rank's record)
with their analysis in `summary.json`. The driver prints where it is and exits 1.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

SECRET = re.compile(r"SECRET|TOKEN|PASSW|PASSWD|KEY|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
PACKAGES = ("torch", "ray", "hydra-core", "omegaconf", "numpy", "torchft-nightly", "reve-platform")
REPO_ROOT = Path(__file__).resolve().parents[1]


def filter_env(env: dict[str, str]) -> dict[str, str]:
    """The environment with the values of secret-looking variables redacted."""
    return {k: ("<redacted>" if SECRET.search(k) else v) for k, v in sorted(env.items())}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that matter for a run ("missing" if absent)."""
    from importlib import metadata

    versions = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


def git_revision(root: Path = REPO_ROOT) -> str:
    """`<commit> (dirty)` of the working tree, or why it is unknown."""
    try:
        commit = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError) as err:
        return f"unknown ({type(err).__name__})"
    return commit + (" (dirty)" if dirty else "")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=10
    )
    return done.stdout.strip()


def rank_report(rank: int, record: dict) -> str:
    """The text of one rank's file: where it ran, its traceback, its last log lines."""
    lines = [f"rank {rank} on {record.get('host', '?')} pid {record.get('pid', '?')}", ""]
    lines += [record.get("traceback", record.get("error", "")).rstrip(), "", "last log lines:"]
    lines += list(record.get("log_lines", [])) or ["(none)"]
    return "\n".join(lines) + "\n"


def flight_recorder(
    folder: Path,
    output_dir: Path,
    ranks: dict[int, dict],
    remote: dict[int, dict] | None = None,
    remote_errors: list[str] | None = None,
) -> dict | None:
    """The ranks' flight recorder dumps into `folder/flight-recorder/`: each as JSON, the
    original files moved under `original/` (the next failure starts clean), the analysis in
    analysis.txt; returns the analysis (None without dumps). Per rank a JSON file wins over
    the snapshot the rank sent, which wins over the watchdog's pickle (read with containers
    and scalars only, never a class); `remote`: dumps other nodes held (crash_gather), used
    for ranks with nothing here."""
    from observability import flight_recorder as fr
    from observability import fr_analysis

    source = Path(output_dir) / fr.DUMP_DIR
    files, errors = fr.load_dir(source) if source.is_dir() else ({}, [])
    sent = {
        r: fr.normalize(rec["flight_recorder"])
        for r, rec in ranks.items()
        if isinstance(rec.get("flight_recorder"), dict)
    }
    json_files = {r: d for r, d in files.items() if (source / f"{fr.PREFIX}{r}.json").exists()}
    dumps = {**(remote or {}), **files, **sent, **json_files}
    errors = [*errors, *(remote_errors or [])]
    if not dumps and not errors:
        return None
    out = folder / fr.DUMP_DIR
    (out / "original").mkdir(parents=True)
    for path in source.glob(f"{fr.PREFIX}*") if source.is_dir() else ():
        path.rename(out / "original" / path.name)
    for rank, dump in sorted(dumps.items()):
        (out / f"{fr.PREFIX}{rank}.json").write_text(json.dumps(dump, indent=1))
    report = {**fr_analysis.analyse(dumps), "errors": errors}
    (out / "analysis.txt").write_text("\n".join(fr_analysis.lines(report) + errors) + "\n")
    return report


def write_bundle(
    output_dir: str | Path,
    config_yaml: str,
    error: BaseException,
    ranks: dict[int, dict],
    driver_lines: list[str],
    hosts: dict[int, dict] | None = None,
    nodes: list[dict] | None = None,
) -> Path:
    """Write the crash bundle and return its folder. `hosts`: every rank's pod, node and
    attempt (the run's channel); `nodes`: what the other nodes hold (crash_gather)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    folder = Path(output_dir) / f"crash-{stamp}"
    suffix = 1
    while folder.exists():
        folder = Path(output_dir) / f"crash-{stamp}-{suffix}"
        suffix += 1
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(config_yaml)
    exc_text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    (folder / "error.txt").write_text(exc_text)
    nodes = nodes or []
    remote = {int(r): d for n in nodes for r, d in (n.get("dumps") or {}).items()}
    flight = flight_recorder(
        folder,
        Path(output_dir),
        ranks,
        remote,
        [e for n in nodes for e in n.get("dump_errors") or []],
    )
    for rank, record in sorted(ranks.items()):
        (folder / f"rank-{rank}.txt").write_text(rank_report(rank, record))
    (folder / "ranks.json").write_text(json.dumps(ranks_json(ranks, hosts or {}), indent=1))
    node_files(folder, Path(output_dir), nodes)
    (folder / "driver.log").write_text("\n".join(driver_lines) + "\n")
    (folder / "environment.json").write_text(json.dumps(filter_env(dict(os.environ)), indent=1))
    (folder / "versions.json").write_text(json.dumps(package_versions(), indent=1))
    (folder / "git.txt").write_text(git_revision() + "\n")
    summary = {
        "time": stamp,
        "error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
        "failed_ranks": sorted(ranks),
    }
    if flight is not None:
        summary["flight_recorder"] = flight
    (folder / "summary.json").write_text(json.dumps(summary, indent=1))
    return folder


def ranks_json(ranks: dict[int, dict], hosts: dict[int, dict]) -> dict:
    """`ranks.json`: every rank's pod, node and attempt, and the failed ranks' records
    (their error line, time, process; the traceback stays in rank-<r>.txt)."""
    keep = ("error", "time", "host", "pid")
    failed = {
        str(r): {
            **{k: rec.get(k) for k in keep if k in rec},
            **{k: v for k, v in hosts.get(r, {}).items()},
        }
        for r, rec in sorted(ranks.items())
    }
    members = {str(r): dict(h) for r, h in sorted(hosts.items())}
    return {"failed": failed, "members": members}


def node_files(folder: Path, output_dir: Path, nodes: list[dict]) -> None:
    """`logs/` (the tail of every process's log file, this node's and the others') and
    `nodes/<node>/kernel.log` (or `kernel.txt` saying why it could not be read)."""
    from driver.output import crash_gather
    from driver.output.logs import where_am_i
    from observability.logs import LOG_DIR

    here = where_am_i()["node"]
    logs = output_dir / LOG_DIR
    local = (
        {p.name: crash_gather.tail(p) for p in sorted(logs.glob("*.jsonl"))}
        if logs.is_dir()
        else {}
    )
    text, source = crash_gather.kernel_log()
    seen: set[str] = set()
    for node in [{"node": here, "logs": local, "kernel": text, "kernel_source": source}, *nodes]:
        name = safe(str(node.get("node") or "unknown"))
        if name in seen:  # several Ray nodes of one machine (a local multi-node run)
            continue
        seen.add(name)
        for file, tail in (node.get("logs") or {}).items():
            target = folder / LOG_DIR / safe(file)
            if tail and not target.exists():
                target.parent.mkdir(exist_ok=True)
                target.write_text(tail)
        where = folder / "nodes" / name
        where.mkdir(parents=True, exist_ok=True)
        if node.get("kernel"):
            (where / "kernel.log").write_text(node["kernel"])
        else:
            why = node.get("kernel_source")
            (where / "kernel.txt").write_text(f"kernel log not readable: {why}\n")


def safe(name: str) -> str:
    """One path component from a node, pod or file name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")[:200] or "_"


def log_failures(cfg, ranks: dict[int, dict], hosts: dict[int, dict]) -> int:
    """Each failed rank's error and traceback as an ERROR line of the run's logs (with the
    rank's labels: `logs/failures.jsonl`), ingested into the run's store when it has one
    (the progress thread closed it; this process is still its one writer). The count."""
    from driver.output.runlogs import LogSpec
    from observability import logs

    spec = LogSpec.of(cfg)
    rows = []
    for rank, record in sorted(ranks.items()):
        host = hosts.get(rank, {})
        tags = spec.labels(
            rank=rank, attempt=host.get("attempt", 0), pod=host.get("pod"), node=host.get("node")
        )
        text = f"rank {rank} failed: {record.get('error', '')}\n{record.get('traceback', '')}"
        rows.append(
            logs.row(
                tags, record.get("time") or time.time(), text.rstrip(), "ERROR", "driver.crash"
            )
        )
    folder = Path(spec.folder)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "failures.jsonl").open("a") as f:
        f.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    if getattr(cfg.logging, "store", False):
        from observability.store import LocalStore

        try:
            with LocalStore.open(cfg.run.output_dir) as store:
                logs.Ingest(folder, store).poll()
        except Exception as err:  # the lines stay in the files
            print(f"crash: log lines not ingested into the store: {err}", file=sys.stderr)
    return len(rows)


def collect(
    cfg,
    config_yaml: str,
    error: BaseException,
    ranks: dict[int, dict],
    driver_lines: list[str],
    hosts: dict[int, dict] | None = None,
) -> Path:
    """The driver's call when training fails (see the module docstring): the bundle's
    folder. Gathering, logging and uploading never hide the failure: a step that fails
    leaves a line in NOTES.txt (or on stderr after signing)."""
    from driver.output import crash_gather, crash_upload

    output_dir = Path(cfg.run.output_dir)
    nodes, missing = crash_gather.gather(str(output_dir.resolve()))
    folder = write_bundle(output_dir, config_yaml, error, ranks, driver_lines, hosts, nodes)
    notes = [f"node not gathered: {line}" for line in missing]
    try:
        log_failures(cfg, ranks, hosts or {})
    except Exception as err:
        notes.append(f"failure lines not logged: {type(err).__name__}: {err}")
    if notes:
        (folder / "NOTES.txt").write_text("\n".join(notes) + "\n")
    root = getattr(cfg.logging, "bundle_root", None)
    if root:
        try:
            uri = crash_upload.upload(folder, root, cfg.run.team, cfg.run.name)
            print(f"crash bundle kept at {uri}", file=sys.stderr)
        except Exception as err:  # the bundle is still in the output folder
            print(
                f"crash bundle not uploaded to {root}: {type(err).__name__}: {err}", file=sys.stderr
            )
    return folder
