"""One-line config errors: Hydra override syntax, and Hydra's and OmegaConf's multi-line
messages turned into a `catalog.InputError` naming the file and the key.

Used by `driver.config.compose.compose`; `one_line(path, err)` maps an exception, `check_overrides`
rejects overrides that are not `key=value` before Hydra sees them.
"""

from __future__ import annotations

import re
from pathlib import Path

from catalog.errors import InputError


def check_overrides(path: Path, overrides: list[str]) -> None:
    """Each override must parse as Hydra's `key=value` (also `+key=`, `~key`, `group=option`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in overrides:
        key = text.split("=", 1)[0].lstrip("+~") or text
        if "=" not in text and not text.startswith("~"):
            raise InputError(path, key, f"override {text!r} is not key=value")
        try:
            parser.parse_override(text)
        except Exception as err:
            lines = [line for line in str(err).splitlines() if line and "override" not in line]
            cause = lines[0] if lines else type(err).__name__
            raise InputError(path, key, f"cannot parse override {text!r}: {cause}") from None


_FULL_KEY = re.compile(r"full_key: ([\w.\[\]]+)")
_NOT_IN = re.compile(r"Key '(\w+)' not in '(\w+)'")
_OVERRIDE = re.compile(r"Could not override '([\w.]+)'")
_GROUP = re.compile(r"Could not find '(\w+)/")
_MERGING = re.compile(r"Error merging override \+*([\w.]+)")
_YAML_AT = re.compile(r"line (\d+), column (\d+)")


def one_line(path: Path, err: Exception) -> InputError:
    """Hydra's and OmegaConf's multi-line messages as one line naming the key."""
    text = str(err)
    cause = err.__cause__ or err.__context__
    detail = str(cause) if cause is not None else text
    if type(err).__module__.startswith("yaml"):
        where = _YAML_AT.search(text)
        at = f" at line {where.group(1)}, column {where.group(2)}" if where else ""
        return InputError(path, None, f"invalid YAML{at}: {text.splitlines()[0]}")
    group = _GROUP.search(text)
    if group:
        return InputError(path, group.group(1), _group_message(text, group.group(1)))
    key = None
    for pattern, source in (
        (_MERGING, text),
        (_FULL_KEY, detail),
        (_OVERRIDE, text),
        (_FULL_KEY, text),
    ):
        found = pattern.search(source)
        if found:
            key = found.group(1)
            break
    first = next((line for line in detail.splitlines() if line.strip()), detail).strip()
    if _NOT_IN.search(detail) or "not in struct" in detail.lower():
        message = "unknown key"
    elif "Value '" in first:
        message = first.split(" (", 1)[0].strip()
    else:
        message = first.rstrip(".")
    return InputError(path, key, message)


def _group_message(text: str, group: str) -> str:
    """`no option 'x' (available: a, b)` from Hydra's missing-option message."""
    wanted = re.search(rf"Could not find '{group}/([^']+)'", text)
    lines = text.split(f"Available options in '{group}':", 1)[-1].splitlines()
    options = []
    for line in lines[1:]:
        if not line.startswith("\t"):
            break
        if not line.strip().endswith("_schema"):
            options.append(line.strip())
    return f"no option {wanted.group(1)!r} (available: {', '.join(options) or 'none'})"
