"""Diff of the rendered overlays and app-of-apps between two git revisions.

    scripts/overlay-diff REV1 [REV2]     (REV2 defaults to the working tree)
    scripts/overlay-diff --exit-code origin/main HEAD

Each revision's kustomize/ folder is exported with `git archive` into a temporary folder
(the repository, its index and its worktrees are left untouched), every kustomization under
kustomize/overlays/ and kustomize/argocd/ is built with the real kustomize, and a unified
diff per kustomization is printed, as a pull request shows what a merge would change in
the clusters.
"""

from __future__ import annotations

import argparse
import difflib
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from kustomize.tooling import build

GROUPS = ("overlays", "argocd")


def export(repo: Path, rev: str, dest: Path) -> Path:
    """Write the kustomize/ folder of `rev` under `dest` (none if it has none); returns dest."""
    dest.mkdir(parents=True, exist_ok=True)
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "--name-only", rev, "kustomize"],
        capture_output=True,
        text=True,
    )
    if listing.returncode != 0:
        raise build.ToolError(f"git ls-tree {rev}: {listing.stderr.strip()}")
    if not listing.stdout.strip():
        return dest
    out = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", rev, "kustomize"],
        capture_output=True,
    )
    if out.returncode != 0:
        raise build.ToolError(f"git archive {rev}: {out.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def kustomizations(tree: Path) -> list[str]:
    """Relative folders of every overlay and app-of-apps in a tree (bases excluded)."""
    found = []
    for group in GROUPS:
        for kfile in sorted((tree / "kustomize" / group).glob("*/kustomization.yaml")):
            if kfile.parent.name != "base":
                found.append(str(kfile.parent.relative_to(tree)))
    return found


def render(tree: Path, rel: str, tool: str) -> str:
    """The build of one kustomization, or an empty string if it is absent in this tree."""
    if not (tree / rel / "kustomization.yaml").is_file():
        return ""
    return build.build_text(tree, tree / rel, tool)


def diff_trees(old: Path, new: Path, labels: tuple[str, str], tool: str) -> str:
    """Unified diffs of every kustomization present in either tree."""
    chunks = []
    for rel in sorted(set(kustomizations(old)) | set(kustomizations(new))):
        before, after = render(old, rel, tool), render(new, rel, tool)
        if before == after:
            continue
        chunks += difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"{labels[0]}/{rel}",
            tofile=f"{labels[1]}/{rel}",
        )
    return "".join(chunks)


def overlay_diff(repo: Path, rev1: str, rev2: str | None, tool: str) -> str:
    with tempfile.TemporaryDirectory(prefix="overlay-diff-") as tmp:
        old = export(repo, rev1, Path(tmp) / "a")
        new = export(repo, rev2, Path(tmp) / "b") if rev2 else repo
        return diff_trees(old, new, (rev1, rev2 or "worktree"), tool)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Diff rendered overlays between revisions.")
    parser.add_argument("rev1")
    parser.add_argument("rev2", nargs="?", help="default: the working tree")
    parser.add_argument("--exit-code", action="store_true", help="exit 1 when they differ")
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="git repository")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    try:
        tool = build.kubectl(Path(__file__).resolve().parents[2])
        text = overlay_diff(repo, args.rev1, args.rev2, tool)
    except build.ToolError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(text or f"no changes to rendered overlays between {args.rev1} and "
                     f"{args.rev2 or 'the working tree'}\n")  # fmt: skip
    return 1 if args.exit_code and text else 0


if __name__ == "__main__":
    sys.exit(main())
