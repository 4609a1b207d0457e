"""PR staging: commit run files onto a branch `run/<name>` without touching the work tree.

`stage()` writes blobs straight into git's object store and builds the tree in a temporary
index, so the working tree, the index and the current branch stay exactly as they are.
Where the tree is no git repository (or has no commit yet), `manual_commands()` gives the
git commands that do the same by hand. `runner submit` uses both; the files themselves
(apps/ text and headers) come from `runner.gitops`.

    from runner.gitstage import has_commits, stage
    if has_commits(root):
        commit = stage(root, "tiny-lm", {"apps/ultra-usc1/research/tiny-lm.yaml": text}, "msg")
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path


class GitError(RuntimeError):
    """A git command failed (the message is one line: the command and git's last line)."""


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "failed"


def git(root: Path, *args: str, env: dict | None = None, check: bool = True) -> str:
    result = subprocess.run(
        ["git", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if check and result.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {_last_line(result.stderr)}")
    return result.stdout.strip()


def is_git_repo(root: Path) -> bool:
    """A git work tree (False too when git is not installed: the files are then written)."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"], cwd=root, capture_output=True, text=True
        )
    except FileNotFoundError:
        return False
    return result.returncode == 0 and result.stdout.strip() == "true"


def branch_name(run: str) -> str:
    return f"run/{run}"


def stage(root: Path, run: str, files: dict[str, str], message: str) -> str:
    """Commit `files` (repository path -> text) onto branch run/<run>; returns the commit.

    Blobs are written straight into the object store and the tree is built in a temporary
    index, so the working tree, the index and HEAD stay exactly as they are. The branch
    starts at HEAD, or continues from its own tip if it exists.
    """
    branch = branch_name(run)
    tip = git(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False)
    parent = tip or git(root, "rev-parse", "HEAD")
    with tempfile.TemporaryDirectory() as folder:
        env = {"GIT_INDEX_FILE": str(Path(folder) / "index")}
        git(root, "read-tree", parent, env=env)
        for relative, text in sorted(files.items()):
            blob = git_input(root, text, "hash-object", "-w", "--stdin")
            git(root, "update-index", "--add", "--cacheinfo", f"100644,{blob},{relative}", env=env)
        tree = git(root, "write-tree", env=env)
    commit = git(root, "commit-tree", tree, "-p", parent, "-m", message)
    git(root, "update-ref", f"refs/heads/{branch}", commit)
    return commit


def git_input(root: Path, text: str, *args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=root, input=text, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {_last_line(result.stderr)}")
    return result.stdout.strip()


def has_commits(root: Path) -> bool:
    """A git work tree whose HEAD names a commit (staging needs a parent)."""
    if not is_git_repo(root):
        return False
    return bool(git(root, "rev-parse", "--verify", "--quiet", "HEAD", check=False))


def manual_commands(run: str, files: list[str], message: str) -> list[str]:
    """The git commands that stage a run when the tree is not a git repository."""
    branch = branch_name(run)
    return [
        f"git switch -c {branch}",
        f"git add {' '.join(files)}",
        f"git commit -m {message!r}",
        f"git push -u origin {branch}",
    ]
