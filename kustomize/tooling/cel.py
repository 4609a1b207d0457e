"""Evaluate the CEL rules of CRD schemas (`x-kubernetes-validations`) on custom resources.

`kustomize.tooling.crds` keeps each rule (and its message) where the CRD declares it; this
walks an object along its schema and evaluates every rule with `self` bound to the value
at that node, using cel-python (a pure-Python CEL interpreter). What it cannot decide
offline is counted, never passed silently:
- transition rules (they read `oldSelf`, which exists only on an update);
- rules that use a Kubernetes CEL library function cel-python lacks, or that fail for any
  reason other than a missing field.
Schema defaults are not applied first (the API server applies them): a rule that reads a
defaulted field the object leaves out fails here, so write such fields out.

    from kustomize.tooling import cel
    cel.problems(obj, schema)    # ["spec.x: <message>", ...]
    cel.STATS                    # {"evaluated": n, "transition": n, "unsupported": n}
"""

from __future__ import annotations

import functools
import logging
from collections import Counter

import celpy

from kustomize.tooling.crds import CEL_KEY

logging.getLogger("celpy").setLevel(logging.CRITICAL)
STATS: Counter = Counter()
_ENV = celpy.Environment()
# Evaluation errors that mean the object lacks a field the rule reads: a failed rule, as
# the API server reports it.
MISSING = ("no such member", "no such key")


@functools.cache
def _program(rule: str):
    """The compiled rule, or None when cel-python cannot parse it."""
    try:
        return _ENV.program(_ENV.compile(rule))
    except Exception:  # noqa: BLE001 (any parse failure means: not evaluated here)
        return None


def evaluate(rule: str, value: object) -> bool | None:
    """True/False for the rule on `value`; None when it cannot be decided offline."""
    if "oldSelf" in rule:
        STATS["transition"] += 1
        return None
    program = _program(rule)
    if program is None:
        STATS["unsupported"] += 1
        return None
    try:
        result = program.evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELEvalError as err:
        if any(text in str(err.args[0] if err.args else err) for text in MISSING):
            STATS["evaluated"] += 1
            return False
        STATS["unsupported"] += 1
        return None
    if isinstance(result, celpy.CELEvalError):
        STATS["unsupported"] += 1
        return None
    STATS["evaluated"] += 1
    return bool(result)


def problems(value: object, schema: dict, path: str = "") -> list[str]:
    """Every rule of `schema` (and of its sub-schemas) that `value` breaks."""
    found = []
    for rule in schema.get(CEL_KEY, []):
        if evaluate(rule["rule"], value) is False:
            message = rule.get("message") or f"failed rule: {rule['rule']}"
            found.append(f"{path or '(root)'}: {message}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub:
                found += problems(item, sub, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found += problems(item, schema["items"], f"{path}[{i}]")
    return found
