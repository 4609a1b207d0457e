"""The GitOps gate: `runner render --check` fails on anything under apps/ that the renderer
did not write, whatever its name, depth, kind or file type."""

from __future__ import annotations

import os

import pytest

from catalog import exitcodes
from tests.runner.conftest import write_run
from tests.runner.test_cli import run_cli

ADMIN = """apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: everyone-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: Group, name: system:authenticated, apiGroup: rbac.authorization.k8s.io}]
"""


@pytest.fixture
def rendered(repo, base, capsys):
    """A repository whose one run is rendered and whose check passes."""
    path = write_run(repo / "runs" / "lm", base, "t-run.yaml")
    assert run_cli(["render", str(path)], capsys)[0] == exitcodes.OK
    assert run_cli(["render", "--check"], capsys)[0] == exitcodes.OK
    return repo


@pytest.mark.parametrize(
    "relative",
    [
        "apps/ultra-usc1/research/admin.yaml",
        "apps/admin.yaml",
        "apps/ultra-usc1/admin.json",
        "apps/ultra-usc1/research/deeper/admin.yml",
        "apps/ultra-usc1/research/.admin.yaml",
    ],
)
def test_a_hand_written_file_fails_the_check(rendered, capsys, relative):
    target = rendered / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(ADMIN)
    code, out, err = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.DIFFERS
    assert f"{relative}: has no `# Rendered by runner` header: not written by runner" in out
    assert "1 file(s) in apps/ differ" in err


def test_a_binding_appended_to_a_rendered_file_fails_the_check(rendered, capsys):
    target = rendered / "apps/ultra-usc1/research/t-run.yaml"
    target.write_text(target.read_text() + "---\n" + ADMIN)
    code, out, _ = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.DIFFERS
    assert "+kind: ClusterRoleBinding" not in out and "-kind: ClusterRoleBinding" in out


def test_a_copied_header_does_not_make_a_file_rendered(rendered, capsys):
    source = (rendered / "apps/ultra-usc1/research/t-run.yaml").read_text()
    header = "".join(source.splitlines(keepends=True)[:4])
    (rendered / "apps/ultra-usc1/research/admin.yaml").write_text(header + "---\n" + ADMIN)
    code, out, _ = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.DIFFERS
    assert "admin.yaml: no run definition renders this file" in out


def test_links_and_fifos_fail_the_check_without_being_read(rendered, capsys):
    folder = rendered / "apps/ultra-usc1/research"
    os.symlink("/etc/passwd", folder / "link.yaml")
    os.symlink(folder, rendered / "apps/ultra-usc1/loop")
    os.mkfifo(folder / "pipe.yaml")
    code, out, _ = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.DIFFERS
    assert "apps/ultra-usc1/research/link.yaml: a symbolic link" in out
    assert "apps/ultra-usc1/loop: a symbolic link" in out
    assert "apps/ultra-usc1/research/pipe.yaml: not a regular file" in out
