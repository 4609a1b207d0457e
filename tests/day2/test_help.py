"""Every day-2 and preflight command has help, and start-up stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.day2.conftest import invoke

COMMANDS = [
    "preflight",
    "check",
    "list",
    "status",
    "describe",
    "logs",
    "delete",
    "shell",
    "cp",
    "port-forward",
    "diagnose",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command):
    result = invoke([command, "--help"])
    assert result.exit_code == 0 and result.stdout.startswith(f"Usage: runner {command}")


def test_help_imports_no_heavy_module():
    code = (
        "import sys, runner.cli\n"
        "from click.testing import CliRunner\n"
        f"for c in {COMMANDS!r}:\n"
        "    CliRunner().invoke(runner.cli.cli, [c, '--help'])\n"
        "heavy = ('torch', 'ray', 'pulumi', 'kubernetes')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr
