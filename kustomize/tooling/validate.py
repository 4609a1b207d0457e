"""Validate the platform add-ons: what `scripts/validate` runs, locally and in CI.

    scripts/validate [--charts DIR] [--only NAME]

1. The generated YAML is up to date (`python -m kustomize.tooling.generate --check`).
2. Every overlay and app-of-apps under kustomize/ builds with the real kustomize.
3. Every object validates against the Kubernetes schemas of its cluster's version (strict)
   or, for custom resources, the derived CRD schemas in kustomize/schemas/ including their
   CEL rules (`kustomize.tooling.cel`); so do the runs rendered into apps/<cluster>/; scope,
   duplicates and references (ConfigMaps, service accounts, priority classes, roles)
   are checked. Security (`kustomize.tooling.security`): host paths read-only and no
   privileged container unless listed with a reason, a `team-isolation` NetworkPolicy in
   every team namespace, the runs' Argo CD project limited to run kinds and team namespaces.
   Each cluster's GPU node add-ons provide every host path and device annotation its
   accelerators' pods rely on (`kustomize.tooling.addons`).
4. Versions are pinned: images by release tag or digest, charts by exact version, Grafana
   plugins by version; chart values are linted against the chart's values shape.
5. With --charts DIR (chart sources, e.g. from `helm pull --untar` on a connected machine),
   every chart Application is rendered with the real helm and its objects validated too.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from catalog import InputError, load_cluster, repo_root
from kustomize.tooling import (
    addons,
    build,
    cel,
    charts,
    checks,
    crds,
    generate,
    images,
    refs,
    security,
)
from kustomize.tooling.security_objects import OWN_REPO  # the one place it is set

OFFLINE_NOTE = (
    "not checked offline: CEL transition rules and rules cel-python cannot evaluate (counted "
    "above), admission webhooks, and chart templates unless --charts DIR gives their sources"
)


@dataclass
class Report:
    """Problems found, by the overlay (or chart) they belong to."""

    problems: list[str] = field(default_factory=list)
    objects: int = 0
    targets: int = 0
    rendered: list[str] = field(default_factory=list)

    def add(self, where: str, items: list[str]) -> None:
        self.problems += [f"{where}: {item}" for item in items]


def check_objects(objects: list[dict], version: str, scoped: bool = True) -> list[str]:
    """Every problem of a set of objects that ArgoCD would apply together."""
    found = checks.duplicates(objects) + refs.problems(objects)
    found += security.team_policy_problems(objects) + security.runs_gate_problems(objects)
    for obj in objects:
        name = checks.ident(obj)
        items = checks.schema_problems(obj, version)
        if scoped and (problem := checks.scope_problem(obj)):
            items.append(problem)
        items += checks.image_problems(obj)
        items += security.host_path_problems(obj)
        items += checks.application_problems(obj, OWN_REPO)
        if obj.get("kind") == "Application":
            items += charts.values_problems(obj)
        found += [f"{name}: {item}" for item in items]
    return found


def app_objects(root: Path, cluster: str) -> dict[str, list[dict]]:
    """The runs `runner render` wrote for a cluster (what the `runs` Application syncs)."""
    import yaml

    out = {}
    for path in sorted((root / "apps" / cluster).rglob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        out[str(path.relative_to(root))] = docs
    return out


def check_apps(objects: list[dict], version: str) -> list[str]:
    """Rendered runs: schemas (KubeRay CRDs with their CEL rules), scope, pinned images and
    confined pods (security.run_pod_problems).

    References (the team's service account, queues, priority classes) live in the platform
    overlay, so they are not checked here."""
    found = []
    for obj in objects:
        items = checks.schema_problems(obj, version)
        if problem := checks.scope_problem(obj):
            items.append(problem)
        items += checks.image_problems(obj)
        items += security.run_pod_problems(obj)
        found += [f"{checks.ident(obj)}: {item}" for item in items]
    return found


def check_rendered_chart(objects: list[dict], version: str) -> list[str]:
    """A rendered chart: its own CRDs validate its custom resources."""
    own = {}
    for obj in objects:
        if obj.get("kind") == "CustomResourceDefinition":
            for name, schema in crds.derive(obj).items():
                own[name] = schema
    found = []
    for obj in objects:
        if obj.get("kind") == "CustomResourceDefinition":
            continue
        items = checks.schema_problems(obj, version)
        if items and items[0].startswith("no schema"):
            items = _own_crd_problems(obj, own)
        items += checks.image_problems(obj)
        found += [f"{checks.ident(obj)}: {i}" for i in items]
    return found


def _own_crd_problems(obj: dict, own: dict) -> list[str]:
    import jsonschema

    group, _, ver = obj.get("apiVersion", "").rpartition("/")
    schema = own.get(crds.schema_name(group, ver, obj.get("kind", "")))
    if schema is None:
        return [f"no schema for {obj.get('apiVersion')} {obj.get('kind')}"]
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)
    ]


def run(root: Path, charts_dir: Path | None = None, only: str | None = None) -> Report:
    if charts_dir is not None and not charts_dir.is_dir():
        raise InputError("--charts", None, f"{charts_dir} is not a folder")
    chosen = [t for t in build.targets(root) if not only or only in t.name(root)]
    if not chosen:
        raise InputError("--only", None, f"no overlay or app-of-apps path contains {only!r}")
    report = Report()
    stale = generate.stale_files(root)
    report.add("generate", [f"{p.relative_to(root)} is stale; run generate" for p in stale])
    tool = build.kubectl(root)
    helm = build.find_tool("helm", root) if charts_dir else None
    for cluster in sorted({t.cluster for t in chosen}):
        folder = root / "kustomize" / "overlays" / f"{cluster}{build.NODE_ADDONS_SUFFIX}"
        objects = build.build(root, folder, tool) if folder.is_dir() else []
        report.add(f"node add-ons of {cluster}", addons.problems(load_cluster(cluster), objects))
    entries = images.load_entries(root)
    for cluster in sorted({t.cluster for t in chosen}):
        spec = load_cluster(cluster)
        for rel, objects in app_objects(root, cluster).items():
            report.objects += len(objects)
            report.add(rel, check_apps(objects, spec.kubernetes_version))
            refs = list(dict.fromkeys(c["image"] for o in objects for c in checks.containers(o)))
            report.add(rel, images.digest_problems(spec, entries, refs))
    for target in chosen:
        name = target.name(root)
        version = load_cluster(target.cluster).kubernetes_version
        objects = build.build(root, target.path, tool)
        report.targets += 1
        report.objects += len(objects)
        report.add(name, check_objects(objects, version))
        if charts_dir is not None:
            for app in objects:
                if app.get("kind") == "Application" and charts.chart_source(app):
                    report.add(name, render_chart(app, charts_dir, helm, version, report))
    return report


def render_chart(app: dict, charts_dir: Path, helm: str, version: str, report: Report) -> list[str]:
    src = charts.chart_source(app)
    chart, rev = src["chart"], str(src["targetRevision"])
    folder = charts.find_chart(charts_dir, chart, rev)
    if folder is None:
        return [f"chart {chart} {rev} not found under {charts_dir}"]
    try:
        objects = charts.render(app, folder, helm, f"{version}.0")
    except RuntimeError as err:
        return [str(err)]
    report.rendered.append(f"{chart} {rev} ({len(objects)} objects)")
    return [f"chart {chart} {rev}: {p}" for p in check_rendered_chart(objects, version)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build and validate every overlay.")
    parser.add_argument("--charts", type=Path, help="folder of chart sources to render")
    parser.add_argument("--only", help="only overlays whose path contains this")
    args = parser.parse_args(argv)
    try:
        report = run(repo_root(), args.charts, args.only)
    except (InputError, build.ToolError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for problem in report.problems:
        print(problem)
    for item in report.rendered:
        print(f"rendered {item}")
    stats = cel.STATS
    print(f"CEL rules: {stats['evaluated']} evaluated, {stats['transition']} transition rules "
          f"(need the old object), {stats['unsupported']} not evaluable offline")  # fmt: skip
    print(OFFLINE_NOTE if args.charts is None else OFFLINE_NOTE.split(", and chart")[0])
    status = "FAILED" if report.problems else "ok"
    print(f"{status}: {report.targets} kustomizations, {report.objects} objects, "
          f"{len(report.problems)} problems")  # fmt: skip
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
