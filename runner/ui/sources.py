"""Where the dashboard's data comes from: a local outputs folder or a cluster.

`LocalSource`: runs are `<outputs>/<team>/<name>/` folders (config.yaml, metrics.jsonl,
summary.json, and `chdb/`, the run's store). With a store, the sections come from its SQL
(read through runner.ui.reader); without one, from metrics.jsonl (rank 0's rows).
`ClusterSource`: the same SQL on the cluster's ClickHouse, and membership from the
Kubernetes API (runner.kube's adapter). Both answer `runs()`, `run(team, name, opts)` and
`logs(team, name, log_options)` (runner.ui.logview); a local source also `verdict(team,
name)` (runner.diagnose). Finished and failed runs stay listed with their crash bundles; a
DiLoCo learner's run names its experiment (`experiment`, `learner`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from runner.ui import jsonl, queries

LIVE_S = 60.0  # a run whose metrics changed this recently is running


@dataclass(frozen=True)
class Options:
    """Bounded request parameters (validated by the server)."""

    points: int = 300
    ranks: int = 64
    window_s: int = 30
    windows: int = 40


def sections(query, team: str, name: str, opts: Options) -> dict:
    return {
        "members": queries.members(query, team, name, 4096),
        "series": queries.series(query, team, name, opts.points),
        "rank_step_time": queries.rank_step_time(query, team, name, opts.points, opts.ranks),
        "aux": queries.aux(query, team, name),
        "aux_queues": queries.aux_queues(query, team, name, opts.points),
        "stragglers": queries.stragglers(
            query, team, name, opts.window_s, opts.ranks, opts.windows
        ),
    }


class LocalSource:
    def __init__(self, outputs: Path, only: tuple[str, str] | None = None, reader=None):
        from runner.ui.reader import StoreReader

        self.outputs, self.only = Path(outputs), only
        self.reader = reader or StoreReader()

    def folders(self) -> dict[tuple[str, str], Path]:
        found = {}
        if self.only:
            folder = self.outputs / self.only[0] / self.only[1]
            return {self.only: folder} if folder.is_dir() else {}
        for folder in sorted(self.outputs.glob("*/*")):
            if folder.is_dir() and any((folder / f).exists() for f in
                                       ("metrics.jsonl", "summary.json", "chdb")):  # fmt: skip
                found[(folder.parent.name, folder.name)] = folder
        return found

    def runs(self) -> list[dict]:
        return [self.describe(team, name, f) for (team, name), f in self.folders().items()]

    def describe(self, team: str, name: str, folder: Path) -> dict:
        summary = read_json(folder / "summary.json")
        changed = last_change(folder)
        if summary is not None:
            state = "finished"
        elif any(folder.glob("crash-*")):
            state = "failed"
        else:
            state = "running" if time.time() - changed < LIVE_S else "stopped"
        learner = jsonl.learner(folder / "metrics.jsonl")
        return {"team": team, "run": name, "state": state, "updated": changed,
                "store": (folder / "chdb").is_dir(),
                "last_step": jsonl.last_step(folder / "metrics.jsonl"),
                "world_size": (summary or {}).get("world_size"),
                "bundles": sorted(p.name for p in folder.glob("crash-*") if p.is_dir()),
                "learner": learner, "experiment": experiment_of(name, learner)}  # fmt: skip

    def run(self, team: str, name: str, opts: Options) -> dict | None:
        folder = self.folders().get((team, name))
        if folder is None:
            return None
        head = {"run": self.describe(team, name, folder),
                "summary": read_json(folder / "summary.json") or {}}  # fmt: skip
        if (folder / "chdb").is_dir():
            query = lambda sql, params: self.reader.query(folder, sql, params)  # noqa: E731
            return {**head, **sections(query, team, name, opts), "source": "chdb"}
        rows = jsonl.read(folder / "metrics.jsonl")
        return {**head, **jsonl.sections(rows, head["summary"], opts.points), "source": "jsonl"}

    def logs(self, team: str, name: str, opts) -> dict | None:
        from runner.ui import logview

        folder = self.folders().get((team, name))
        if folder is None:
            return None
        return logview.local_logs(self.reader, folder, team, name, opts)

    def verdict(self, team: str, name: str) -> dict | None:
        from runner.ui import logview

        folder = self.folders().get((team, name))
        return None if folder is None else logview.local_verdict(folder)

    def close(self) -> None:
        self.reader.close()


class ClusterSource:
    def __init__(self, store, kube=None, namespace: str | None = None):
        self.store, self.kube, self.namespace = store, kube, namespace

    def runs(self) -> list[dict]:
        found = {(r["team"], r["run"]): {**r, "state": "-", "updated": r["last_time"],
                                         "experiment": experiment_of(r["run"], r["learner"])}
                 for r in queries.runs(self.store.query)}  # fmt: skip
        if self.kube is not None:
            from runner.commands.list import collect

            for s in collect(self.kube, self.namespace):
                key = (s["team"] or s["namespace"], s["run"])
                found[key] = {**found.get(key, {"team": key[0], "run": key[1]}),
                              "state": s["state"], "pods": s["pods"]}  # fmt: skip
        return sorted(found.values(), key=lambda r: (r["team"], r["run"]))

    def run(self, team: str, name: str, opts: Options) -> dict | None:
        body = sections(self.store.query, team, name, opts)
        pods = []
        if self.kube is not None:
            from runner.commands._day2_views import pod_row

            pods = [pod_row(p) for p in self.kube.pods_of_run(self.namespace or team, name)]
        body["members"] = merge_pods(body["members"], pods)
        if not body["members"] and not body["series"]["step"]:
            return None
        return {"run": {"team": team, "run": name, "state": "-"}, "summary": {}, **body,
                "source": "clickhouse"}  # fmt: skip

    def logs(self, team: str, name: str, opts) -> dict | None:
        from runner.ui import logview

        return logview.cluster_logs(self.store, team, name, opts)

    def verdict(self, team: str, name: str) -> dict | None:
        return None  # a cluster run's analysis: `runner diagnose RUN --analyze`

    def close(self) -> None:
        pass


def merge_pods(ranks: list[dict], pods: list[dict]) -> list[dict]:
    """Ranks (from metrics) joined with the run's pods by pod name; pods without a rank
    (the head, a pending worker) are listed too."""
    by_pod = {p["pod"]: p for p in pods}
    out = []
    for r in ranks:
        pod = by_pod.get(r["pod"], {})
        out.append({**r, "phase": pod.get("phase", ""), "role": pod.get("role", ""),
                    "node": r["node"] or pod.get("node", "")})  # fmt: skip
    seen = {r["pod"] for r in ranks}
    for p in pods:
        if p["pod"] not in seen:
            out.append({"rank": None, "pod": p["pod"], "node": p["node"], "phase": p["phase"],
                        "role": p["role"], "last_step": None, "last_time": None})  # fmt: skip
    return out


def experiment_of(run: str, learner: str) -> str:
    """A DiLoCo learner's experiment: its run is `<experiment>-<learner>` (runner.experiment)."""
    suffix = f"-{learner}"
    return run[: -len(suffix)] if learner and run.endswith(suffix) else ""


def last_change(folder: Path) -> float:
    """When the run last wrote metrics: metrics.jsonl, or a table of its store gaining a part
    (which changes the table folder, `chdb/store/<xxx>/<uuid>`)."""
    paths = [folder / "metrics.jsonl", *(folder / "chdb").glob("store/*/*")]
    return max((p.stat().st_mtime for p in paths if p.exists()), default=0.0)


def read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
