"""docs/day2.md and docs/preflight.md match the code: every flag of every command is there."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from runner.cli import COMMANDS

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = {
    "preflight": "preflight.md",
    "check": "preflight.md",
    **dict.fromkeys(
        ["list", "status", "describe", "logs", "delete", "shell", "cp", "port-forward"], "day2.md"
    ),
    "diagnose": "day2.md",
}


def command(name: str):
    module, attribute = COMMANDS[name][0].split(":")
    return getattr(importlib.import_module(module), attribute)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_flag_is_documented(name):
    text = (DOCS / PAGES[name]).read_text()
    flags = {
        opt
        for param in command(name).params
        for opt in (*param.opts, *param.secondary_opts)
        if opt.startswith("--") and opt != "--help"
    }
    shared = {"--namespace", "--cluster", "--output"}  # the table of shared flags in day2.md
    missing = sorted(f for f in flags - shared if f not in text)
    assert missing == [], f"{PAGES[name]} does not mention {missing} of runner {name}"


def test_shared_flags_are_in_the_table():
    text = (DOCS / "day2.md").read_text()
    assert all(f in text for f in ("`-n, --namespace NS`", "`--cluster NAME`", "`-o, --output"))
