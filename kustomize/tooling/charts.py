"""Helm-chart Applications: lint their values offline, render them when a chart is at hand.

Charts live in upstream repositories this machine cannot reach, so each pinned chart
version has a committed *values shape* (`kustomize/charts/<chart>-<version>.json`): the
chart's default values.yaml with every leaf replaced by its type. Our values may only use
keys the chart knows (or keys under a default that is empty or null, which charts leave
free-form, or under a value the chart passes to a Kubernetes field, like `resources`), with
the same kind of value. When a folder of chart sources is given
(`scripts/validate --charts DIR`), each Application is also rendered with a real
`helm template` and its objects validated like the overlays.

    python -m kustomize.tooling.charts derive CHART_DIR    write the values shape of a chart
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

SHAPES_DIR = Path(__file__).resolve().parents[1] / "charts"
FREE = "free"
# Values charts pass through to a Kubernetes field with toYaml: their keys are the API's.
PASSTHROUGH = {"resources", "securityContext", "podSecurityContext", "containerSecurityContext",
               "affinity", "nodeSelector", "tolerations", "annotations", "labels",
               "livenessProbe", "readinessProbe", "startupProbe", "strategy"}  # fmt: skip


def shape(value: object) -> object:
    """Default values with leaves replaced by their type; empty maps and nulls are free-form."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()} if value else FREE
    if value is None:
        return FREE
    if isinstance(value, list):
        return "list"
    return "scalar"


def lint(values: object, expected: object, path: str = "") -> list[str]:
    """Where `values` leaves the chart's shape: unknown keys, maps for scalars and so on."""
    if expected == FREE:
        return []
    where = path or "(root)"
    if isinstance(expected, dict):
        if not isinstance(values, dict):
            return [f"{where}: expected a map"]
        found = []
        for key, value in values.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in expected:
                found.append(f"{sub}: the chart has no such value")
            elif key in PASSTHROUGH and isinstance(value, dict):
                continue
            else:
                found += lint(value, expected[key], sub)
        return found
    if expected == "list":
        return [] if isinstance(values, list) or values is None else [f"{where}: expected a list"]
    if isinstance(values, (dict, list)):
        return [f"{where}: expected a single value"]
    return []


def chart_source(app: dict) -> dict | None:
    src = app.get("spec", {}).get("source") or {}
    return src if src.get("chart") else None


def shape_file(chart: str, version: str) -> Path:
    return SHAPES_DIR / f"{chart}-{version}.json"


def values_problems(app: dict) -> list[str]:
    """Lint one Application's chart values against the committed shape of its version."""
    src = chart_source(app)
    if src is None:
        return []
    chart, version = src["chart"], str(src.get("targetRevision"))
    path = shape_file(chart, version)
    if not path.is_file():
        return [f"no values shape for chart {chart} {version}: derive {path.name}"]
    values = (src.get("helm") or {}).get("valuesObject") or {}
    found = lint(values, json.loads(path.read_text()))
    found += embedded_config_problems(chart, values)
    return [f"chart {chart} {version}: {p}" for p in found]


def embedded_config_problems(chart: str, values: dict) -> list[str]:
    """Configuration carried as a YAML string inside values must parse and name its API."""
    if chart != "kueue":
        return []
    text = (values.get("managerConfig") or {}).get("controllerManagerConfigYaml")
    if text is None:
        return []
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        return [f"managerConfig.controllerManagerConfigYaml: invalid YAML: {err}"]
    if not isinstance(config, dict) or config.get("kind") != "Configuration":
        return ["managerConfig.controllerManagerConfigYaml: not a Kueue Configuration"]
    if not str(config.get("apiVersion", "")).startswith("config.kueue.x-k8s.io/"):
        return ["managerConfig.controllerManagerConfigYaml: apiVersion is not config.kueue"]
    return []


def find_chart(charts_dir: Path, chart: str, version: str) -> Path | None:
    """A folder under charts_dir whose Chart.yaml is this chart at this exact version."""
    for meta in sorted(charts_dir.glob("**/Chart.yaml")):
        data = yaml.safe_load(meta.read_text()) or {}
        if data.get("name") == chart and str(data.get("version")) == version:
            return meta.parent
    return None


def render(app: dict, chart_dir: Path, helm: str, kube_version: str) -> list[dict]:
    """`helm template` of an Application's chart with its values, as objects."""
    src = chart_source(app) or {}
    helm_cfg = src.get("helm") or {}
    release = helm_cfg.get("releaseName") or app["metadata"]["name"]
    namespace = app["spec"]["destination"].get("namespace", "default")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values:
        yaml.safe_dump(helm_cfg.get("valuesObject") or {}, values)
        values.flush()
        cmd = [helm, "template", release, str(chart_dir), "--namespace", namespace]
        cmd += ["--values", values.name, "--kube-version", kube_version, "--include-crds"]
        out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"helm template {src.get('chart')}: {out.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "derive":
        print("usage: python -m kustomize.tooling.charts derive CHART_DIR", file=sys.stderr)
        return 2
    folder = Path(args[1])
    meta = yaml.safe_load((folder / "Chart.yaml").read_text())
    defaults = yaml.safe_load((folder / "values.yaml").read_text()) or {}
    SHAPES_DIR.mkdir(exist_ok=True)
    target = shape_file(meta["name"], str(meta["version"]))
    target.write_text(json.dumps(shape(defaults), indent=1, sort_keys=True) + "\n")
    print(f"wrote {target.relative_to(SHAPES_DIR.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
