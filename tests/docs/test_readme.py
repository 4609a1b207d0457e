"""Every command the README shows runs as written here, or is marked with why it cannot.

The README's ```bash blocks are read line by line (a trailing backslash continues a line).
Each command must be in COMMANDS: "run" ones run as written from a fresh clone of the
repository (with this checkout's .venv linked in), slow ones under `-m slow`; the others
say where they are covered or that they need a cluster. A new README command fails
`test_every_readme_command_is_accounted_for` until it is added here.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN, SLOW = "run", "slow"
SETUP_INPUTS = ("pyproject.toml", "scripts/setup")  # what scripts/setup hashes into its stamp
COMMANDS = {
    "./scripts/try": SLOW,
    "./scripts/test": "covered: .ci/run runs it (the whole suite)",
    "./scripts/try --steps 50 --set optimizer.lr=1e-3": SLOW,
    ".venv/bin/runner run --local runs/examples/tiny-lm.yaml --steps 50"
    " --set optimizer.lr=1e-3": SLOW,
    ".venv/bin/runner run --local runs/examples/tiny-lm.yaml --set run.local_dashboard=true": SLOW,
    ".venv/bin/runner run --local runs/examples/tiny-lm.yaml --shape 2x2 --steps 20": SLOW,
    ".venv/bin/runner run --local runs/examples/diloco-two-regions.yaml --steps 40": SLOW,
    ".venv/bin/python -m driver.train runs/train/tiny-dit.yaml": SLOW,
    ".venv/bin/python -m driver.train runs/train/tiny-dit.yaml aux=none": SLOW,
    ".venv/bin/python -m driver.train runs/train/tiny-dit-remote-data.yaml": SLOW,
    ".venv/bin/runner render runs/examples/tiny-lm.yaml -o -": RUN,
    ".venv/bin/runner render --check": RUN,
    ".venv/bin/runner validate runs/examples/*.yaml": RUN,
    ".venv/bin/runner submit -f runs/examples/tiny-lm.yaml": RUN,
    ".venv/bin/runner submit my-run rayjob --cluster ultra-usc1 --namespace research --pods 2"
    " --gpus 8 --accelerators H200 --cmd 'python train.py' --docker-image "
    "us-docker.pkg.dev/reve-train-ultra/training/trainer:2026.11.0": RUN,
    "runner list / status RUN / logs RUN [--rank N|--pod P] [-f] / describe / shell / cp /"
    " port-forward / diagnose / delete": "cluster: a summary of the day-2 commands (tests/day2)",
    "runner diagnose RUN --analyze [--json] [--propose|--approve]": "cluster: the run's "
    "evidence from the Kubernetes API (tests/diagnose/test_cli.py runs the same analysis)",
    ".venv/bin/runner diagnose --analyze --local tests/fixtures/failures/xid79-fell-off-bus": RUN,
    "runner preflight RUN [--wait 900]": "cluster: a placed run's pods (tests/preflight)",
    "runner preflight --local": RUN,
    "runner check NODE --cluster C": "cluster: a Job pinned to a node (tests/preflight)",
    'eval "$(_RUNNER_COMPLETE=bash_source runner)"': RUN,
}


def readme_commands(text: str) -> list[str]:
    """The commands of the ```bash blocks, comments removed, continuations joined."""
    commands, block, pending = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            block = line.strip() == "```bash"
            continue
        if not block:
            continue
        line = pending + re.sub(r"\s+#\s.*$", "", line).strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        if line:
            commands.append(re.sub(r"\s+", " ", line))
    return commands


def test_every_readme_command_is_accounted_for():
    shown = readme_commands((ROOT / "README.md").read_text())
    assert [c for c in shown if c not in COMMANDS] == []
    assert [c for c in COMMANDS if c not in shown] == []


def test_readme_commands_parse():
    text = "```bash\na --x   # note\nb \\\n  c\n```\n```\nnot bash\n```\n"
    assert readme_commands(text) == ["a --x", "b c"]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A fresh clone of this checkout's HEAD with its .venv and tools linked in."""
    where = tmp_path_factory.mktemp("readme") / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
    stale = _stale_setup(where)
    if stale:
        pytest.fail(stale, pytrace=False)
    for name in (".venv", ".tools"):
        if (ROOT / name).exists():
            (where / name).symlink_to(ROOT / name)
    return where


def _stale_setup(clone: Path) -> str:
    """Why this checkout's .venv cannot be linked into `clone`, or "". Its set-up stamp
    must match the clone's files: with another stamp, the clone's `./scripts/setup` would
    reinstall the project into the shared .venv, its editable install then pointing at the
    clone (which pytest deletes later) for every test after it."""
    import hashlib

    stamp = ROOT / ".venv" / ".setup-stamp"
    want = hashlib.sha256(b"".join((clone / f).read_bytes() for f in SETUP_INPUTS)).hexdigest()
    if not stamp.exists() or stamp.read_text().strip() == want:
        return ""  # no .venv here to link, or an up-to-date one
    return (".venv/.setup-stamp is not HEAD's pyproject.toml and scripts/setup: commit "
            "them and run ./scripts/setup first")  # fmt: skip


def run_as_written(command: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    # The clone's own code first: the linked .venv's editable install points at this checkout.
    env = {
        **os.environ,
        "PATH": f"{cwd / '.venv/bin'}:{os.environ['PATH']}",
        "PYTHONPATH": str(cwd),
    }
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("command", [c for c, how in COMMANDS.items() if how == RUN])
def test_readme_command_runs(command, clone):
    done = run_as_written(command, clone, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c, how in COMMANDS.items() if how == SLOW])
def test_readme_slow_command_runs(command, clone):
    done = run_as_written(command, clone, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("workers", ["two", "0", "-1", "2x"])
def test_a_bad_number_of_test_workers_is_one_line(workers):
    env = {**os.environ, "TEST_WORKERS": workers}
    cmd = [str(ROOT / "scripts" / "test")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stdout == ""
    expected = f"TEST_WORKERS={workers}: expected a number of pytest workers (1, 2, ...)"
    assert done.stderr == f"error: {expected}\n"
