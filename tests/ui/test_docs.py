"""docs/ui.md matches the code: every flag of `runner ui` and every API parameter."""

from __future__ import annotations

import re
from pathlib import Path

from runner.commands.ui import ui
from runner.ui.server import LIMITS

TEXT = (Path(__file__).resolve().parents[2] / "docs" / "ui.md").read_text()


def test_every_flag_is_documented():
    flags = {o for p in ui.params for o in p.opts if o.startswith("--") and o != "--help"}
    assert sorted(f for f in flags if not re.search(re.escape(f) + "[ `]", TEXT)) == []


def test_every_api_parameter_and_its_bounds_are_documented():
    for key, (low, high) in LIMITS.items():
        assert f"`{key}` ({low}–{high}" in TEXT, key
