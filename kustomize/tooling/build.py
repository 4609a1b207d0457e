"""Find the pinned tools and build kustomizations with the real `kubectl kustomize`.

python -m kustomize.tooling.build kustomize/overlays/ultra-usc1    print the build
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from catalog import InputError

TOOLS_DIR = ".tools/bin"
CHECKOUT = Path(__file__).resolve().parents[2]  # the tools sit beside this code
KUSTOMIZE_MAJOR = 5
FAIR_SHARING_SUFFIX = "-fair-sharing"
NODE_ADDONS_SUFFIX = "-node-addons"


class ToolError(Exception):
    """A tool is missing, too old, or a build failed."""


def find_tool(name: str, root: Path) -> str:
    """`.tools/bin/<name>` (scripts/fetch-tools installs it) of `root` or of this checkout,
    else `<name>` on PATH."""
    for folder in (root, CHECKOUT):
        local = folder / TOOLS_DIR / name
        if local.is_file() and os.access(local, os.X_OK):
            return str(local)
    found = shutil.which(name)
    if not found:
        raise ToolError(f"{name} not found in {TOOLS_DIR} or PATH; run scripts/fetch-tools")
    return found


def kubectl(root: Path) -> str:
    """The kubectl to build with; its embedded kustomize must be v5 or newer."""
    path = find_tool("kubectl", root)
    out = subprocess.run([path, "version", "--client"], capture_output=True, text=True)
    match = re.search(r"Kustomize Version: v(\d+)", out.stdout)
    if not match or int(match.group(1)) < KUSTOMIZE_MAJOR:
        raise ToolError(f"{path} lacks kustomize v{KUSTOMIZE_MAJOR}; run scripts/fetch-tools")
    return path


@dataclass(frozen=True)
class Target:
    """One kustomization that ArgoCD syncs: a cluster overlay or a cluster's app-of-apps."""

    path: Path
    """Folder of the kustomization.yaml."""
    cluster: str
    """The cluster (clusters/<name>) whose Kubernetes version its objects must fit."""

    def name(self, root: Path) -> str:
        return str(self.path.relative_to(root))


def targets(root: Path) -> list[Target]:
    """Every overlay and app-of-apps folder, sorted; each belongs to one cluster."""
    found = []
    for group in ("overlays", "argocd"):
        for kfile in sorted((root / "kustomize" / group).glob("*/kustomization.yaml")):
            folder = kfile.parent
            if folder.name == "base":
                continue
            cluster = folder.name.removesuffix(FAIR_SHARING_SUFFIX).removesuffix(NODE_ADDONS_SUFFIX)
            if not (root / "clusters" / cluster / "cluster.yaml").is_file():
                raise InputError(str(kfile.relative_to(root)), None, f"no cluster {cluster!r}")
            found.append(Target(folder, cluster))
    return found


def build(root: Path, path: Path, tool: str | None = None) -> list[dict]:
    """The objects `kubectl kustomize <path>` renders."""
    cmd = [tool or kubectl(root), "kustomize", str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise ToolError(f"{path.relative_to(root)}: kustomize build failed: {out.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def build_text(root: Path, path: Path, tool: str | None = None) -> str:
    cmd = [tool or kubectl(root), "kustomize", str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise ToolError(f"{path}: kustomize build failed: {out.stderr.strip()}")
    return out.stdout


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m kustomize.tooling.build FOLDER", file=sys.stderr)
        return 2
    root = Path.cwd()
    try:
        print(build_text(root, Path(args[0]).resolve()), end="")
    except ToolError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
