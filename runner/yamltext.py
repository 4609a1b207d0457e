"""A small, fast, deterministic YAML writer for manifests (dicts, lists, str, int, float, bool).

Block style, keys in insertion order, strings plain when YAML reads them back as the same
string, multi-line strings as literal blocks, anything else double-quoted (JSON escapes are
valid YAML). `yaml.safe_load(dump(x)) == x` for every value it accepts (tested).

    from runner.yamltext import dump_documents
    text = dump_documents([{"apiVersion": "v1", "kind": "ConfigMap"}])
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./@=+-]*(?:[ ,][A-Za-z0-9_./@=+-]+)*$")
_WORDS = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~"}
_LITERAL_OK = re.compile(r"^[^\s][^\t\r]*\n$", re.S)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def quoted_json(value: Any) -> str:
    """JSON text that is also valid YAML: characters YAML forbids raw are escaped."""
    text = json.dumps(value, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def scalar(value: Any) -> str:
    """One scalar as YAML text."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)  # YAML 1.1 floats need a dot: 1e-05 -> 1.0e-05
        return text.replace("e", ".0e") if "e" in text and "." not in text else text
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in _WORDS and "\n" not in value:
            return value
        if '"' in value and "'" not in value and value.isprintable():
            return f"'{value}'"  # single-quoted YAML: no escapes, reads back as written
        return quoted_json(value)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _literal(value: str) -> bool:
    return (
        "\n" in value[:-1]
        and value.replace("\n", "").isprintable()
        and _LITERAL_OK.match(value) is not None
        and not any(line != line.rstrip() for line in value.split("\n"))
    )


def _lines(value: Any, indent: str, out: list[str]) -> None:
    """Append the block lines of a mapping or sequence at `indent`."""
    if isinstance(value, dict):
        for key, item in value.items():
            # a sequence under a key sits at the key's indentation (kubectl style)
            _item(f"{indent}{scalar(key)}:", item, indent + "  ", indent, out)
        return
    for item in value:
        if isinstance(item, dict) and item:
            lead = f"{indent}- "
            for key, sub in item.items():
                _item(f"{lead}{scalar(key)}:", sub, indent + "    ", indent + "  ", out)
                lead = f"{indent}  "
        else:
            _item(f"{indent}-", item, indent + "  ", indent + "  ", out)


def _item(lead: str, value: Any, indent: str, list_indent: str, out: list[str]) -> None:
    if isinstance(value, dict | list) and value:
        out.append(lead)
        _lines(value, indent if isinstance(value, dict) else list_indent, out)
    elif isinstance(value, dict):
        out.append(f"{lead} {{}}")
    elif isinstance(value, list):
        out.append(f"{lead} []")
    elif isinstance(value, str) and _literal(value):
        out.append(f"{lead} |")
        out.extend(f"{indent}{line}" if line else "" for line in value[:-1].split("\n"))
    else:
        out.append(f"{lead} {scalar(value)}")


def dump_document(value: dict) -> str:
    if not value:
        return "{}\n"
    out: list[str] = []
    _lines(value, "", out)
    return "\n".join(out) + "\n"


def dump_documents(documents: list[dict]) -> str:
    """Documents, each starting with `---`."""
    return "".join(f"---\n{dump_document(doc)}" for doc in documents)
