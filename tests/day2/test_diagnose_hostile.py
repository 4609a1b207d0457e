"""`runner diagnose` with hostile names: every value that reaches a shell is quoted, and no
cluster-given name can steer where a file lands in the archive."""

from __future__ import annotations

import shlex
import tarfile

import pytest

from runner.commands.diagnose import safe_name
from tests.day2.conftest import pod, tags
from tests.preflight.conftest import invoke

HOSTILE_DIRS = [
    "out dir/$(touch PWNED)",
    "out'; touch PWNED; echo '",
    "out`touch PWNED`",
    'out"; touch PWNED; "',
    "-rf ; touch PWNED",
]


@pytest.mark.parametrize("output_dir", HOSTILE_DIRS)
def test_output_dir_reaches_the_shell_quoted(fake, tmp_path, monkeypatch, output_dir):
    monkeypatch.chdir(tmp_path)  # the fake pods' working dir is this machine's cwd
    crash = tmp_path / output_dir / "crash-1"
    crash.mkdir(parents=True)
    (crash / "error.txt").write_text("boom")
    out = tmp_path / "bundle.tar.gz"
    result = invoke(["diagnose", "tiny-lm", "--out", str(out), "--output-dir", output_dir])
    assert result.exit_code == 0, result.stderr
    assert not list(tmp_path.rglob("PWNED")), "a value reached the shell unquoted"
    scripts = [c[3][2] for c in fake.calls if c[0] == "exec" and c[3][:2] == ("sh", "-c")]
    assert scripts and all(shlex.quote(output_dir) in s for s in scripts)
    with tarfile.open(out) as tar:
        assert any(n.endswith("/crash/crash-1/error.txt") for n in tar.getnames())


def test_hostile_pod_and_container_names_stay_inside_the_archive(fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, container = "../../tiny-lm-x; touch PWNED", "../../../etc/evil $(touch PWNED)"
    fake.apply(pod(name, "research", tags("tiny-lm", "research", "rayjob", "worker"),
                   container, "gke-h200-9"))  # fmt: skip
    out = tmp_path / "bundle.tar.gz"
    result = invoke(["diagnose", "tiny-lm", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert not list(tmp_path.rglob("PWNED"))
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert all(p not in ("", ".", "..") for n in names for p in n.split("/")), names
    expected = f"/logs/{safe_name(name)}/{safe_name(container)}.log"
    assert "/" not in safe_name(name) + safe_name(container)
    assert any(n.endswith(expected) for n in names), names
    logs = [c for c in fake.calls if c[0] == "logs" and c[2] == name]
    assert logs and logs[0][3] == container  # the API gets the real names, unquoted
