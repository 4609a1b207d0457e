"""The proposed relaunch as a run-file change on a branch: the person who merges it approves.

    spec_data, name = relaunch_data(run_data, verdict.proposal, "tiny-lm", taken={"tiny-lm"})
    files = files_for(spec_data, name)           # runs/<cluster>/<ns>/<name>.yaml + apps/ file
    commit = stage(files, name, message)          # branch run/<name>, as `runner submit` does

A relaunch is the failed run's definition under the next free name `<run>-r<N>`, resuming
from the newest committed checkpoint of the failed run (`resume:`), away from the culprit
nodes (`avoid_nodes:`), with the config fix in `train_overrides` (a key set, or set to
null to undo one). Nothing is applied: the branch is pushed and merged like any run.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from runner import gitops

RELAUNCH = ("restart", "restart_excluding", "fix_config")
_SUFFIX = re.compile(r"^(?P<base>.+?)-r(?P<n>\d+)$")


class NoRelaunch(Exception):
    """The verdict proposes no relaunch (one line: why)."""


def run_definition(run: str, root: Path, cluster: str = "", namespace: str = "") -> Path | None:
    """The run definition of `run`: the source an apps/ file names, else the committed run
    file whose `name:` is `run` (the first under runs/, outside runs/train and runs/env)."""
    if cluster and namespace:
        source = gitops.rendered_source(gitops.apps_path(cluster, namespace, run, root))
        if source and (root / source).exists():
            return root / source
    for path in gitops.run_definitions(root):
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and data.get("name") == run:
            return path
    return None


def next_name(run: str, taken: set[str]) -> str:
    """`tiny-lm` -> `tiny-lm-r1`; `tiny-lm-r1` -> `tiny-lm-r2`; the first name not taken."""
    m = _SUFFIX.match(run)
    base, n = (m["base"], int(m["n"])) if m else (run, 0)
    while True:
        n += 1
        name = f"{base[: 63 - len(f'-r{n}')]}-r{n}"  # a DNS-1123 label: 63 characters
        if name not in taken:
            return name


def overrides(listed: list[str], changes: dict, removed: list[str]) -> list[str]:
    """`train_overrides` with each changed key set (its old entries dropped) and each
    removed key's entries dropped."""
    keys = set(changes) | set(removed)
    kept = [item for item in listed if item.split("=", 1)[0].lstrip("+~") not in keys]
    rendered = {k: "null" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))
                for k, v in changes.items()}  # fmt: skip
    return kept + [f"{k}={v}" for k, v in rendered.items()]


def relaunch_data(data: dict, proposal: dict, run: str, taken: set[str]) -> tuple[dict, str]:
    """(the relaunch's run definition, its name) from the failed run's definition."""
    if proposal.get("action") not in RELAUNCH:
        raise NoRelaunch(f"the verdict's decision is {proposal.get('action')}: nothing to relaunch")
    out = dict(data)
    name = next_name(run, taken | {run})
    out["name"] = name
    if proposal.get("resume"):
        out["resume"] = proposal["resume"]
    else:
        out.pop("resume", None)
    avoid = sorted(set(out.get("avoid_nodes") or []) | set(proposal.get("avoid_nodes") or []))
    if avoid:
        out["avoid_nodes"] = avoid
    listed = list(out.get("train_overrides") or [])
    changed = overrides(listed, proposal.get("set") or {}, proposal.get("remove") or [])
    if changed:
        out["train_overrides"] = changed
    return out, name


def header(verdict, source: str) -> str:
    why = " ".join(verdict.why.split())
    return (f"# Relaunch of {verdict.run.get('run')} proposed by `runner diagnose --propose`\n"
            f"# ({verdict.decision}, {verdict.category}): {why[:300]}\n"
            f"# From {source}; merging this change approves the relaunch.\n")  # fmt: skip


def files_for(data: dict, verdict, source: str, root: Path) -> tuple[str, dict[str, str]]:
    """(run file path, {repository path: text}) of the relaunch: its run definition and its
    rendered apps/ file (as `runner submit` writes them)."""
    from runner.commands.render import apps_text
    from runner.render import render as render_spec
    from runner.spec import build_spec

    relative = f"runs/{data['cluster']}/{data['namespace']}/{data['name']}.yaml"
    text = header(verdict, source) + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    spec = build_spec(yaml.safe_load(text), relative)
    rendered = render_spec(spec)
    apps = gitops.relative_to_root(gitops.apps_path(spec.cluster, spec.namespace, spec.name, root),
                                   root)  # fmt: skip
    return relative, {relative: text, apps: apps_text(rendered)}


def taken_names(root: Path) -> set[str]:
    """Run names already used by committed run definitions."""
    names = set()
    for path in gitops.run_definitions(root):
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            names.add(data["name"])
    return names
