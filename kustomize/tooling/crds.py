"""JSON schemas of the custom resources the platform ships, derived from upstream CRDs.

The objects of kinds that come from CRDs (Argo CD Applications, Kueue queues, Managed
Prometheus monitors) are validated against `kustomize/schemas/<group>_<version>_<kind>.json`:
the CRD's openAPIV3Schema, descriptions dropped, unknown fields rejected where the API server
would prune them. Their CEL rules (`x-kubernetes-validations`) are kept and evaluated by
`kustomize.tooling.cel`.

    python -m kustomize.tooling.crds derive CRD.yaml [...]   (re)write the committed schemas
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

import jsonschema
import yaml

SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"
CEL_KEY = "x-kubernetes-validations"
"""CEL rules kept from the CRD (rule, message), evaluated by `kustomize.tooling.cel`."""
KEEP = ("type", "required", "enum", "pattern", "minimum", "maximum", "minLength", "maxLength",
        "minItems", "maxItems", "format")  # fmt: skip


def convert(node: dict) -> dict:
    """One openAPIV3Schema node as a JSON schema node."""
    out: dict = {k: node[k] for k in KEEP if k in node}
    if "pattern" in out and not _compiles(out["pattern"]):
        del out["pattern"]
    out.pop("format", None)  # Kubernetes formats (int32, date-time) are not checked here
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in node and key not in out:
            out[key] = [convert(n) for n in node[key]]
    if "items" in node:
        out["items"] = convert(node["items"])
    if "properties" in node:
        out["properties"] = {k: convert(v) for k, v in node["properties"].items()}
    preserve = node.get("x-kubernetes-preserve-unknown-fields", False)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = convert(extra)
    elif extra is not None:
        out["additionalProperties"] = extra
    elif "properties" in node and not preserve:
        out["additionalProperties"] = False
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    rules = [
        {k: v for k, v in rule.items() if k in ("rule", "message", "messageExpression")}
        for rule in node.get("x-kubernetes-validations", [])
    ]
    if rules:
        out[CEL_KEY] = rules
    return out


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def schema_name(group: str, version: str, kind: str) -> str:
    return f"{group}_{version}_{kind}.json"


def derive(crd: dict) -> dict[str, dict]:
    """Schemas (by file name) of every served version of one CustomResourceDefinition."""
    spec = crd["spec"]
    out = {}
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        root = dict(version["schema"]["openAPIV3Schema"])
        props = dict(root.get("properties", {}))
        props.pop("status", None)
        props["metadata"] = {"type": "object"}
        root["properties"] = props
        schema = convert(root)
        schema["x-scope"] = spec["scope"]
        name = schema_name(spec["group"], version["name"], spec["names"]["kind"])
        out[name] = schema
    return out


@functools.cache
def load(api_version: str, kind: str) -> dict | None:
    """The committed schema of a CRD kind, or None when the platform ships none."""
    group, _, version = api_version.rpartition("/")
    path = SCHEMAS_DIR / schema_name(group, version, kind)
    return json.loads(path.read_text()) if path.is_file() else None


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator | None:
    schema = load(api_version, kind)
    return jsonschema.Draft202012Validator(schema) if schema else None


def problems(obj: dict) -> list[str] | None:
    """Schema violations of a custom resource; None when its kind has no schema here."""
    validator = _validator(obj.get("apiVersion", ""), obj.get("kind", ""))
    if validator is None:
        return None
    found = []
    for err in validator.iter_errors(obj):
        where = ".".join(str(p) for p in err.absolute_path) or "(root)"
        found.append(f"{where}: {err.message}")
    from kustomize.tooling import cel  # CEL rules after the structural schema

    return found + cel.problems(obj, validator.schema)


def scope(api_version: str, kind: str) -> str | None:
    schema = load(api_version, kind)
    return schema.get("x-scope") if schema else None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "derive":
        print("usage: python -m kustomize.tooling.crds derive CRD.yaml [...]", file=sys.stderr)
        return 2
    SCHEMAS_DIR.mkdir(exist_ok=True)
    for path in args[1:]:
        for crd in yaml.safe_load_all(Path(path).read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            for name, schema in derive(crd).items():
                (SCHEMAS_DIR / name).write_text(json.dumps(schema, sort_keys=True) + "\n")
                print(f"wrote {SCHEMAS_DIR.name}/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
