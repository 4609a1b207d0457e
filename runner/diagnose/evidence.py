"""Everything a failed run left, read into one `Evidence`: the input of the rules.

`load(path)` takes a local run's output folder (what `runner run --local` prints at its
end: crash-*/ bundles, logs/, metrics.jsonl, summary.json), a crash bundle folder alone,
or the folder of a `runner diagnose` archive (objects, pods, events, container logs, the
run's log lines from the store, bundles, Warden's history). It reads the newest bundle
(failure records, `ranks.json`, the flight recorder analysis, `nodes/<node>/kernel.log`),
the run's metrics (the loss), and finds the evidence lines of every log file
(runner.diagnose.scan). Reads only; a missing part is simply absent.

    ev = load(Path("outputs/research/tiny-lm"))
    ev.failures[1].traceback, ev.members[1]["node"], ev.kernel["node-3"], ev.flight
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from runner.diagnose import scan

METRIC_TAIL = 4 << 20  # bytes of metrics.jsonl read from its end
_RANK_HEADER = re.compile(r"^rank (\d+) on (\S+) pid (\S+)")
_PID = re.compile(r"\bpid[=:]\s*(\d+)")


@dataclass
class Failure:
    """One rank's failure record."""

    rank: int
    error: str = ""
    traceback: str = ""
    time: float | None = None
    pod: str = ""
    node: str = ""
    pid: int | None = None
    source: str = ""


@dataclass
class Evidence:
    folder: Path
    team: str = ""
    run: str = ""
    bundle: Path | None = None
    bundle_summary: dict = field(default_factory=dict)
    error_text: str = ""
    summary: dict | None = None  # a run that ended: its summary.json
    failures: dict[int, Failure] = field(default_factory=dict)
    members: dict[int, dict] = field(default_factory=dict)
    flight: dict | None = None
    kernel: dict[str, list[scan.Line]] = field(default_factory=dict)
    lines: list[scan.Line] = field(default_factory=list)
    driver_lines: list[scan.Line] = field(default_factory=list)
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, loss), newest last
    config: dict = field(default_factory=dict)
    exit_code: int | None = None
    pods: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    warden: dict[str, list[dict]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def where(self, rank: int) -> dict:
        """{rank, pod, node} of a rank (its failure record first, then ranks.json)."""
        member, failure = self.members.get(rank, {}), self.failures.get(rank)
        pod = (failure.pod if failure else "") or member.get("pod", "")
        node = (failure.node if failure else "") or member.get("node", "")
        return {"rank": rank, "pod": pod, "node": node}

    def ranks_on(self, node: str) -> list[int]:
        return sorted(r for r in self.members if self.members[r].get("node") == node)

    def nodes(self) -> set[str]:
        return {m.get("node") for m in self.members.values() if m.get("node")}


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_yaml(path: Path):
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def newest_bundle(folder: Path) -> Path | None:
    """The newest crash-* folder in `folder` (or `folder/crash/`), or `folder` itself."""
    if folder.name.startswith("crash-") and (folder / "summary.json").exists():
        return folder
    found = sorted(
        [*folder.glob("crash-*"), *folder.glob("crash/crash-*"), *folder.glob("bundles/crash-*")],
        key=lambda p: p.name,
    )
    found = [p for p in found if p.is_dir()]
    return found[-1] if found else None


def failures_of(bundle: Path) -> tuple[dict[int, Failure], dict[int, dict]]:
    """Failure records (rank-<r>.txt, ranks.json) and every rank's pod and node."""
    info = read_json(bundle / "ranks.json") or {}
    members = {int(r): dict(m) for r, m in (info.get("members") or {}).items()}
    failed = {int(r): f for r, f in (info.get("failed") or {}).items()}
    out = {}
    for path in sorted(bundle.glob("rank-*.txt")):
        try:
            rank = int(path.stem.split("-", 1)[1])
        except ValueError:
            continue
        text = path.read_text(errors="replace")
        record = failed.get(rank, {})
        head = _RANK_HEADER.match(text)
        pid = record.get("pid") if isinstance(record.get("pid"), int) else None
        if pid is None and (m := _PID.search(text)):  # Ray's record of a dead worker
            pid = int(m[1])
        body = text.split("\nlast log lines:", 1)[0]
        out[rank] = Failure(
            rank,
            str(record.get("error") or ""),
            body,
            record.get("time") if isinstance(record.get("time"), int | float) else None,
            str(record.get("pod") or (head[2] if head else "")),
            str(record.get("node") or ""),
            pid,
            path.name,
        )
        if rank not in members and (out[rank].pod or out[rank].node):
            members[rank] = {"pod": out[rank].pod, "node": out[rank].node}
    return out, members


def losses(path: Path) -> list[tuple[int, float]]:
    """(step, loss) of the rows of record at the end of metrics.jsonl (NaN and inf kept)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - METRIC_TAIL))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        if '"loss"' not in line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        value = row.get("loss") if isinstance(row, dict) else None
        if isinstance(value, int | float) and isinstance(row.get("step"), int):
            out.append((row["step"], float(value)))
    return out


def kernel_logs(bundle: Path, root: Path) -> dict[str, list[scan.Line]]:
    out = {}
    for path in sorted(bundle.glob("nodes/*/kernel.log")):
        node = path.parent.name
        out[node] = scan.read_lines(path, root, node)
    return out


def log_files(folder: Path, bundle: Path | None) -> list[Path]:
    """The run's log files: the output folder's (every line), else the bundle's tails;
    container logs of a diagnose archive; the store's lines a cluster diagnose saved."""
    full = sorted((folder / "logs").glob("*.jsonl"))
    tails = sorted((bundle / "logs").glob("*.jsonl")) if bundle else []
    names = {p.name for p in full}
    files = full + [p for p in tails if p.name not in names]
    files += sorted((folder / "logs").glob("*/*.log"))  # diagnose archive: <pod>/<container>
    files += sorted(folder.glob("run-logs*.jsonl"))
    return files


def load(path: Path) -> Evidence:
    """The evidence of a run folder, a bundle folder or an extracted diagnose archive."""
    folder = Path(path)
    ev = Evidence(folder)
    ev.bundle = newest_bundle(folder)
    base = folder.parent if ev.bundle == folder else folder
    if ev.bundle is not None:
        b = ev.bundle
        ev.bundle_summary = read_json(b / "summary.json") or {}
        ev.flight = ev.bundle_summary.get("flight_recorder")
        ev.error_text = (
            (b / "error.txt").read_text(errors="replace") if (b / "error.txt").exists() else ""
        )
        ev.failures, ev.members = failures_of(b)
        ev.kernel = kernel_logs(b, base)
        ev.driver_lines = scan.read_lines(b / "driver.log", base)
        ev.config = read_yaml(b / "config.yaml") or {}
        if (b / "NOTES.txt").exists():
            ev.notes += (b / "NOTES.txt").read_text(errors="replace").splitlines()
    summary = read_json(base / "summary.json")
    ev.summary = (
        summary
        if isinstance(summary, dict)
        and "final_loss" in summary
        or isinstance(summary, dict)
        and "output_dir" in summary
        else None
    )
    ev.config = ev.config or read_yaml(base / "config.yaml") or {}
    run = ev.config.get("run") if isinstance(ev.config.get("run"), dict) else {}
    ev.team, ev.run = str(run.get("team") or ""), str(run.get("name") or "")
    ev.losses = losses(base / "metrics.jsonl")
    ev.lines = scan.scan(log_files(base, ev.bundle), base)
    code = (base / "exit_code").read_text().strip() if (base / "exit_code").exists() else ""
    ev.exit_code = int(code) if code.lstrip("-").isdigit() else None
    cluster(ev, base)
    return ev


def cluster(ev: Evidence, base: Path) -> None:
    """The parts only a `runner diagnose` archive has: pods, events, Warden's history."""
    if (base / "pods.yaml").exists():
        try:
            ev.pods = [p for p in yaml.safe_load_all((base / "pods.yaml").read_text()) if p]
            ev.events = [e for e in yaml.safe_load_all((base / "events.yaml").read_text()) if e]
        except (OSError, yaml.YAMLError) as err:
            ev.notes.append(f"pods/events unreadable: {err}")
    history = read_json(base / "warden.json")
    if isinstance(history, dict):
        ev.warden = {str(k): list(v) for k, v in history.items() if isinstance(v, list)}
    info = read_json(base / "summary.json")
    if isinstance(info, dict) and not ev.run:
        ev.run, ev.team = str(info.get("run") or ""), str(info.get("team") or "")
    for pod in ev.pods:  # ranks' pods and nodes when no bundle said so
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        for member in ev.members.values():
            if member.get("pod") == meta.get("name") and not member.get("node"):
                member["node"] = spec.get("nodeName", "")


def finite(values: list[float]) -> bool:
    return all(math.isfinite(v) for v in values)
