"""The A3 Ultra NCCL settings of the catalog equal set_nccl_env.sh of the pinned gIB.

GPU pods get `nccl_env` from the catalog rather than sourcing the script, so the two must
not drift. The script of the pinned version is test data (`data/gib-<version>-...sh`);
CI also runs this test against the script extracted from the pinned image:

    GIB_SET_NCCL_ENV=gib/scripts/set_nccl_env.sh pytest tests/catalog/test_gib_env.py
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from catalog import accelerator

ROOT = Path(__file__).resolve().parents[2]
INSTALLER = ROOT / "kustomize/bases/node-addons/nccl-rdma-installer/daemonset.yaml"
DATA = Path(__file__).with_name("data")
ASSIGN = re.compile(r"^\s*(?:export\s+)?(NCCL_[A-Z0-9_]+)=(.*)$")


def pinned_gib_version() -> str:
    """The tag of the gIB installer image the node add-on runs (v1.1.0)."""
    ds = yaml.safe_load(INSTALLER.read_text())
    [image] = [c["image"] for c in ds["spec"]["template"]["spec"]["initContainers"]
               if c["name"] == "nccl-rdma-installer"]  # fmt: skip
    return image.rsplit(":", 1)[1]


def script_env(text: str) -> dict[str, str]:
    """The NCCL_* variables a shell script sets to literal values (last one wins)."""
    env = {}
    for line in text.splitlines():
        match = ASSIGN.match(line.split(" #")[0])
        if match:
            [value] = shlex.split(match.group(2)) or [""]
            if "$" in value:
                raise ValueError(f"{match.group(1)} is computed ({value}); compare it by hand")
            env[match.group(1)] = value
    return env


def script_path() -> Path:
    given = os.environ.get("GIB_SET_NCCL_ENV")
    return Path(given) if given else DATA / f"gib-{pinned_gib_version()}-set_nccl_env.sh"


def test_the_pinned_version_has_its_script_as_test_data():
    assert script_path().is_file(), f"add {script_path().name} for gIB {pinned_gib_version()}"


def test_catalog_nccl_env_equals_the_pinned_scripts():
    script = script_env(script_path().read_text())
    assert script, "the script sets no NCCL variable"
    catalog = accelerator("H200").nccl_env
    differ = {k: (v, catalog.get(k)) for k, v in script.items() if catalog.get(k) != v}
    assert differ == {}, f"catalog H200 nccl_env differs from {script_path().name}: {differ}"


@pytest.mark.parametrize(
    ("text", "env"),
    [
        ("export NCCL_NET=gIB\n", {"NCCL_NET": "gIB"}),
        ("NCCL_IB_TC=52  # traffic class\n", {"NCCL_IB_TC": "52"}),
        ("export NCCL_A='x y'\nexport NCCL_A=z\n", {"NCCL_A": "z"}),
        ("export OTHER=1\n# export NCCL_NET=no\n", {}),
    ],
)
def test_script_parsing(text, env):
    assert script_env(text) == env


def test_a_drifted_catalog_value_is_caught():
    script = script_env("export NCCL_IB_TC=53\n")
    assert accelerator("H200").nccl_env["NCCL_IB_TC"] != script["NCCL_IB_TC"]


def test_computed_values_are_refused():
    with pytest.raises(ValueError, match="NCCL_X is computed"):
        script_env("export NCCL_X=${HOME}/x\n")
