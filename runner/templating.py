"""Jinja templates under `runner/templates/`, rendered into parsed Kubernetes manifests.

Templates are the only place manifest text lives. Values enter through the `json` filter
(JSON is YAML), so no value can break the document structure.

    from runner.templating import render_template
    docs = render_template("job.yaml.j2", run={...})  # -> list of manifest dicts
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any

import jinja2
import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from catalog import labels
from runner.yamltext import quoted_json

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR = "tag:yaml.org,2002:str"
_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_SPECIAL_WORDS = {"y", "n", "yes", "no", "true", "false", "on", "off", "null"}


class _Loader(_Base):
    """Safe YAML with a fast path for plain words (most keys); anything else is resolved
    by PyYAML's own resolver, so the result equals `yaml.safe_load`."""

    def resolve(self, kind, value, implicit):
        if kind is ScalarNode and implicit[0] and _WORD.match(value):
            if value.lower() not in _SPECIAL_WORDS:
                return _STR
        return super().resolve(kind, value, implicit)


def _build(node, loader: _Loader) -> Any:
    """Nodes to Python values; only str is built here, other scalars go through PyYAML."""
    if isinstance(node, MappingNode):
        if any(key.tag == "tag:yaml.org,2002:merge" for key, _ in node.value):
            return loader.construct_object(node, deep=True)
        return {_build(k, loader): _build(v, loader) for k, v in node.value}
    if isinstance(node, SequenceNode):
        return [_build(v, loader) for v in node.value]
    if node.tag == _STR:
        return node.value
    return loader.construct_object(node, deep=True)


def parse_documents(text: str) -> list[Any]:
    """Every YAML document of `text` (empty documents dropped), as `yaml.safe_load_all`."""
    loader = _Loader(text)
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            docs.append(_build(node, loader))
        return [doc for doc in docs if doc is not None]
    finally:
        loader.dispose()


_JSON_SAFE = re.compile(r"^[A-Za-z0-9 _./:@=+,-]*$")


def _json(value: Any) -> str:
    if type(value) is str and _JSON_SAFE.match(value):
        return f'"{value}"'  # nothing to escape
    return quoted_json(value)


@functools.cache
def environment() -> jinja2.Environment:
    """The one Jinja environment: strict undefined, templates from the runner package."""
    folder = resources.files("runner").joinpath("templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["json"] = _json
    env.globals["hostname_label"] = labels.HOSTNAME
    return env


def template_name(name: str) -> str:
    """`rayjob` or `rayjob.yaml.j2` -> `rayjob.yaml.j2`."""
    return name if name.endswith(".j2") else f"{name}.yaml.j2"


def render_text(name: str, **context: Any) -> str:
    """The YAML text a template renders."""
    return environment().get_template(template_name(name)).render(**context)


def render_template(name: str, **context: Any) -> list[dict]:
    """Render a template and parse its YAML documents; empty documents are dropped."""
    return parse_documents(render_text(name, **context))
