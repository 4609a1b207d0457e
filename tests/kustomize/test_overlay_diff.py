"""scripts/overlay-diff between two commits of a temporary repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kustomize.tooling import overlaydiff

CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: demo
data:
  replicas: "{replicas}"
"""


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def write_overlay(repo: Path, name: str, replicas: int) -> None:
    folder = repo / "kustomize" / "overlays" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kustomization.yaml").write_text("resources:\n  - settings.yaml\n")
    (folder / "settings.yaml").write_text(CONFIGMAP.format(replicas=replicas))


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository with two commits: the second changes one overlay and adds another."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write_overlay(repo, "alpha", 1)
    write_overlay(repo, "beta", 1)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    write_overlay(repo, "alpha", 2)
    write_overlay(repo, "gamma", 1)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "second")
    return repo


def test_diff_between_two_commits(repo, kubectl):
    text = overlaydiff.overlay_diff(repo, "HEAD~1", "HEAD", kubectl)
    assert "--- HEAD~1/kustomize/overlays/alpha" in text
    assert '-  replicas: "1"' in text and '+  replicas: "2"' in text
    assert "+++ HEAD/kustomize/overlays/gamma" in text  # a new overlay diffs against nothing
    assert "overlays/beta" not in text  # unchanged overlays print nothing
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "worktree", "list").count("\n") == 0


def test_no_changes_and_exit_code(repo, kubectl, capsys):
    assert overlaydiff.overlay_diff(repo, "HEAD", "HEAD", kubectl) == ""
    assert overlaydiff.main(["--repo", str(repo), "--exit-code", "HEAD", "HEAD"]) == 0
    assert "no changes" in capsys.readouterr().out
    assert overlaydiff.main(["--repo", str(repo), "--exit-code", "HEAD~1", "HEAD"]) == 1


def test_working_tree_is_the_default_second_revision(repo, kubectl):
    write_overlay(repo, "beta", 5)
    text = overlaydiff.overlay_diff(repo, "HEAD", None, kubectl)
    assert "+++ worktree/kustomize/overlays/beta" in text and '+  replicas: "5"' in text


def test_unknown_revision_is_an_error(repo, capsys):
    assert overlaydiff.main(["--repo", str(repo), "no-such-rev"]) == 2
    assert "no-such-rev" in capsys.readouterr().err


def test_script_runs(repo):
    script = Path(__file__).resolve().parents[2] / "scripts" / "overlay-diff"
    out = subprocess.run([str(script), "HEAD~1", "HEAD"], cwd=repo, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert '+  replicas: "2"' in out.stdout
