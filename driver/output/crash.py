"""Crash bundles: everything needed to debug a terminal failure, in one folder.

`write_bundle(output_dir, ...)` writes `<output_dir>/crash-<timestamp>/` holding the
composed config, the driver's exception, the exception + traceback + last log lines of every
failed rank, the driver's last log lines, the environment (secrets redacted), package
versions, the git revision and, when ranks left any, their PyTorch flight recorder dumps
(`<output_dir>/flight-recorder/rank_<r>[.json]`, or a `flight_recorder` snapshot in a
failed rank's record) with their analysis in `summary.json`. The driver prints where it is
and exits 1.
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


def flight_recorder(folder: Path, output_dir: Path, ranks: dict[int, dict]) -> dict | None:
    """The ranks' flight recorder dumps into `folder/flight-recorder/`: each as JSON, the
    original files moved under `original/` (the next failure starts clean), the analysis in
    analysis.txt; returns the analysis (None without dumps). Per rank a JSON file wins over
    the snapshot the rank sent, which wins over the watchdog's pickle (read with containers
    and scalars only, never a class)."""
    from observability import flight_recorder as fr
    from observability import fr_analysis

    source = Path(output_dir) / fr.DUMP_DIR
    files, errors = fr.load_dir(source) if source.is_dir() else ({}, [])
    sent = {r: fr.normalize(rec["flight_recorder"]) for r, rec in ranks.items()
            if isinstance(rec.get("flight_recorder"), dict)}  # fmt: skip
    json_files = {r: d for r, d in files.items() if (source / f"{fr.PREFIX}{r}.json").exists()}
    dumps = {**files, **sent, **json_files}
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
) -> Path:
    """Write the crash bundle and return its folder."""
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
    flight = flight_recorder(folder, Path(output_dir), ranks)
    for rank, record in sorted(ranks.items()):
        (folder / f"rank-{rank}.txt").write_text(rank_report(rank, record))
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
