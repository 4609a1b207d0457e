"""docs/runner.md matches the code: every run definition field, its default and every flag."""

from __future__ import annotations

import re

import pytest

from runner.commands.render import render_command
from runner.commands.submit import submit
from runner.spec_schema import RunSpec
from tests.runner.conftest import ROOT

DOC = (ROOT / "docs" / "runner.md").read_text()


def reference_rows() -> dict[str, list[str]]:
    """field -> the cells of its row in the run definition reference table."""
    table = DOC.split("## Run definition reference", 1)[1].split("\n\n## ", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        for field in re.findall(r"`([a-z_]+)`", cells[0]) if line.startswith("| `") else []:
            rows[field] = cells
    return rows


def test_every_field_is_documented_once():
    assert sorted(reference_rows()) == sorted(RunSpec.model_fields)


@pytest.mark.parametrize(
    "field",
    [f for f, info in RunSpec.model_fields.items() if isinstance(info.default, bool | int | str)],
)
def test_documented_defaults_are_the_codes(field):
    default = RunSpec.model_fields[field].default
    text = str(default).lower() if isinstance(default, bool) else str(default)
    assert re.search(rf"(^|[ `]){re.escape(text)}($|[ ,`])", reference_rows()[field][2]), field


@pytest.mark.parametrize("command", [render_command, submit], ids=["render", "submit"])
def test_every_flag_is_documented(command):
    flags = {opt for param in command.params for opt in param.opts if opt.startswith("-")}
    missing = sorted(f for f in flags if f"`{f}" not in DOC and f"{f}/" not in DOC)
    assert missing == []


def test_every_field_but_name_and_env_has_a_render_flag():
    from runner.commands._run_flags import _BOOL_FIELDS, _LIST_FIELDS, _VALUE_FIELDS

    flagged = {*_VALUE_FIELDS, *_BOOL_FIELDS, *_LIST_FIELDS}
    assert flagged | {"name", "env"} == set(RunSpec.model_fields)
    assert len(flagged) == len(_VALUE_FIELDS) + len(_BOOL_FIELDS) + len(_LIST_FIELDS)
