"""Which Kubernetes objects validate by shape alone, and the shape of an object.

A JSON schema that uses none of `VALUE_KEYWORDS` (below the top-level apiVersion/kind enums)
checks only keys and value types, so two objects with the same `shape()` get the same verdict:
`runner.validation.manifests` validates each distinct shape once. Pure functions.
"""

from __future__ import annotations

from typing import Any

# Keywords that constrain a value, not only the structure. When a schema reachable from a kind
# uses none of them below the top level, two objects with the same keys and leaf types validate
# the same way, so each distinct shape is validated once.
VALUE_KEYWORDS = {
    "enum",
    "const",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "not",
    "if",
}


def references(node: Any):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value.rsplit("/", 1)[-1]
            else:
                yield from references(value)
    elif isinstance(node, list):
        for value in node:
            yield from references(value)


def constrains_values(node: Any) -> bool:
    if isinstance(node, dict):
        if VALUE_KEYWORDS & node.keys():
            return True
        return any(constrains_values(v) for k, v in node.items() if k != "description")
    if isinstance(node, list):
        return any(constrains_values(v) for v in node)
    return False


def shape(node: Any) -> Any:
    """The structure of a value: keys kept, strings and numbers replaced by their type."""
    if isinstance(node, dict):
        return {k: shape(v) for k, v in node.items()}
    if isinstance(node, list):
        return [shape(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    return type(node).__name__
