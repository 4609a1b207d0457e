"""Check declared inputs against the installed providers' own argument types.

Pulumi's mocks accept any input, so a misspelled nested key (`reservation_afinity`) or a
value of the wrong shape would pass every other test and fail only against the cloud. This
walks each recorded input through the provider's `*Args` input classes (the Python SDK's
typed schema): every key must be a declared argument, every value must have the declared
shape, required arguments must be present, and a value must be one of the documented
`Possible values are: ...` where the provider lists them.

    from tests.infra.provider_args import problems
    problems(declared)   # [] when every input is a real argument of the right shape
"""

from __future__ import annotations

import collections.abc as abc
import importlib
import inspect
import re
import typing

import pulumi._types as ptypes

# Custom resources with no Python args class (the Application is checked against Argo CD's
# CRD schema in test_kustomize_crosscheck.py; the GKE network objects in test_networks.py).
UNCHECKED_PREFIXES = ("kubernetes:networking.gke.io/", "kubernetes:argoproj.io/")
ENUM_DOC = re.compile(r"Possible values are:?\s*((?:`[^`]+`(?:,?\s*(?:and|or)?\s*))+)")


def args_class(token: str) -> type | None:
    """The provider's args class for a resource type token, or None for schemaless CRDs."""
    if token.startswith(UNCHECKED_PREFIXES):
        return None
    package, module, name = token.split(":")
    if package == "pulumi" and module == "providers":
        return importlib.import_module(f"pulumi_{name}").ProviderArgs
    if package == "gcp":  # gcp:container/nodePool:NodePool -> pulumi_gcp.container
        path = f"pulumi_gcp.{module.split('/')[0]}"
    else:  # kubernetes:helm.sh/v3:Release -> pulumi_kubernetes.helm.v3
        path = f"pulumi_{package}.{module.replace('helm.sh', 'helm').replace('/', '.')}"
    return getattr(importlib.import_module(path), f"{name}Args")


def enum_values(cls: type, pulumi_name: str) -> set[str] | None:
    """The documented `Possible values are: ...` of one argument, if the provider lists them."""
    python_name = {v: k for k, v in ptypes.input_type_py_to_pulumi_names(cls).items()}
    prop = getattr(cls, python_name.get(pulumi_name, ""), None)
    match = ENUM_DOC.search(" ".join((getattr(prop, "__doc__", None) or "").split()))
    return set(re.findall(r"`([^`]+)`", match.group(1))) if match else None


def required(cls: type) -> set[str]:
    """Pulumi names of the arguments the args class's constructor requires."""
    names = ptypes.input_type_py_to_pulumi_names(cls)
    params = inspect.signature(cls.__init__).parameters.values()
    return {names[p.name] for p in params if p.default is p.empty and p.name in names}


def check(value: object, typ: object, path: str) -> list[str]:
    """Problems of one value against its declared (possibly wrapped) type."""
    typ = ptypes.unwrap_type(typ)
    origin = typing.get_origin(typ)
    if ptypes.is_input_type(typ):
        return _check_object(value, typ, path)
    if origin in (abc.Sequence, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {value!r}"]
        [item] = typing.get_args(typ)
        return [p for i, v in enumerate(value) for p in check(v, item, f"{path}[{i}]")]
    if origin in (abc.Mapping, dict):
        if not isinstance(value, dict):
            return [f"{path}: expected a map, got {value!r}"]
        _, item = typing.get_args(typ)
        return [p for k, v in value.items() for p in check(v, item, f"{path}.{k}")]
    return _check_scalar(value, typ, path)


def _check_scalar(value: object, typ: object, path: str) -> list[str]:
    if typ is str and not isinstance(value, str):
        return [f"{path}: expected a string, got {value!r}"]
    if typ is bool and not isinstance(value, bool):
        return [f"{path}: expected a bool, got {value!r}"]
    if typ in (int, float) and (isinstance(value, bool) or not isinstance(value, int | float)):
        return [f"{path}: expected a number, got {value!r}"]
    if typ is int and isinstance(value, float) and not value.is_integer():
        return [f"{path}: expected an integer, got {value!r}"]
    return []


def _check_object(value: object, cls: type, path: str, shapes: bool = True) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({cls.__name__}), got {value!r}"]
    fields = ptypes.input_type_types(cls)
    at = (lambda key: f"{path}.{key}") if path else (lambda key: key)
    out = [f"{at(k)}: required by {cls.__name__}" for k in sorted(required(cls) - set(value))]
    for key, item in value.items():
        if key not in fields:
            out.append(f"{at(key)}: not an argument of {cls.__name__}")
            continue
        if not shapes:
            continue
        out += check(item, fields[key], at(key))
        allowed = enum_values(cls, key)
        if allowed and isinstance(item, str) and item not in allowed:
            out.append(f"{at(key)}: {item!r} is not one of {sorted(allowed)}")
    return out


def problems(resource) -> list[str]:
    """Problems of one recorded resource (an `infra.mocks.Declared`); [] when it conforms."""
    if not resource.custom:
        return []  # a component of ours: its children are checked
    cls = args_class(resource.type)
    if cls is None:
        return []
    # A provider's inputs travel as strings (JSON for objects): check their names only.
    shapes = not resource.type.startswith("pulumi:providers:")
    found = _check_object(resource.inputs, cls, "", shapes)
    return [f"{resource.type} {resource.name}: {p}" for p in found]
