"""`runner diagnose --analyze` at the command line: the verdict as text and JSON, one-line
errors and exit codes, `--propose` committing the relaunch on a branch of a throw-away
repository, and `--approve` asking before it commits and before it hands the culprit node
to a real Warden gateway (over the fake Kubernetes adapter)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from catalog.images import IMAGES_FILE
from tests.preflight.conftest import invoke

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "failures"


def test_the_verdict_as_text_and_json():
    text = invoke(["diagnose", "--analyze", "--local", str(CORPUS / "xid79-fell-off-bus")])
    assert text.exit_code == 0, text.stderr
    assert "decision:   restart_excluding" in text.stdout and "Xid 79" in text.stdout
    out = invoke(["diagnose", "--analyze", "--json", "--local", str(CORPUS / "cuda-oom")])
    verdict = json.loads(out.stdout)
    assert (verdict["decision"], verdict["category"]) == ("fix_config", "oom")
    assert verdict["proposal"]["set"] == {"train.micro_batch_size": 8}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["diagnose", "--json", "--local", "x"], 2, "go with --analyze"),
        (["diagnose", "--analyze"], 2, "give RUN or --local OUTPUT_DIR"),
        (["diagnose"], 2, "give RUN"),
        (["diagnose", "--analyze", "--local", "/no/such/folder"], 4, "no such folder"),
        (["diagnose", "--analyze", "--local", ".", "--approve"], 2, "a person at a terminal"),
        (
            ["diagnose", "--analyze", "--local", ".", "--model-endpoint", "ftp://x"],
            2,
            "is not an http(s) URL",
        ),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(args, code, message):
    result = invoke(args)
    assert result.exit_code == code, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A git repository with the real catalogs, image list and run definitions
    (PLATFORM_ROOT)."""
    root = tmp_path / "repo"
    for part in ("clusters", "runs"):
        shutil.copytree(ROOT / part, root / part)
    (root / IMAGES_FILE).parent.mkdir(parents=True)  # which images are not built yet
    shutil.copy(ROOT / IMAGES_FILE, root / IMAGES_FILE)
    (root / "apps").mkdir()
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True)
    monkeypatch.setenv("PLATFORM_ROOT", str(root))
    return root


def case_named(tmp_path: Path, case: str, run: str, node: str | None = None) -> Path:
    """A copy of a corpus case whose run is `run` (and whose culprit node is `node`)."""
    dest = tmp_path / case
    shutil.copytree(CORPUS / case, dest)
    old = yaml.safe_load((dest / "expected.yaml").read_text())["culprits"]["nodes"]
    for path in [p for p in dest.rglob("*") if p.is_file()]:
        text = path.read_text().replace(f"name: {case}\n", f"name: {run}\n")
        path.write_text(text.replace(old[0], node) if node and old else text)
    for folder in dest.glob("crash-*/nodes/*"):
        if node and old and folder.name == old[0]:
            folder.rename(folder.parent / node)
    return dest


def branch_file(repo: Path, branch: str, path: str) -> str:
    done = subprocess.run(
        ["git", "show", f"{branch}:{path}"], cwd=repo, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_propose_commits_the_relaunch_on_a_branch(repo, tmp_path):
    case = case_named(tmp_path, "xid79-fell-off-bus", "tiny-lm")
    result = invoke(["diagnose", "--analyze", "--local", str(case), "--propose"])
    assert result.exit_code == 0, result.stderr
    assert "on branch run/tiny-lm-r1" in result.stdout
    run = yaml.safe_load(
        branch_file(repo, "run/tiny-lm-r1", "runs/ultra-usc1/research/tiny-lm-r1.yaml")
    )
    assert run["name"] == "tiny-lm-r1" and run["avoid_nodes"] == ["gke-ultra-a3u-pool-1-q9x2"]
    assert run["train_config"] == "runs/train/tiny-lm.yaml"
    apps = branch_file(repo, "run/tiny-lm-r1", "apps/ultra-usc1/research/tiny-lm-r1.yaml")
    assert "operator: NotIn" in apps and "gke-ultra-a3u-pool-1-q9x2" in apps
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True
    ).stdout
    assert status == ""  # the work tree is untouched


def test_propose_for_a_code_fix_commits_nothing(repo, tmp_path):
    case = case_named(tmp_path, "raising-transform", "tiny-lm")
    result = invoke(["diagnose", "--analyze", "--local", str(case), "--propose"])
    assert (
        result.exit_code == 0 and "no relaunch: the verdict's decision is fix_code" in result.stderr
    )
    branches = subprocess.run(["git", "branch"], cwd=repo, capture_output=True, text=True).stdout
    assert "run/" not in branches


def test_approve_asks_then_commits_and_hands_the_node_to_warden(repo, tmp_path, monkeypatch):
    from runner.keepnodes import KEPT_FOR
    from warden.fakefleet import FakeCluster
    from warden.gateway import Gateway

    fleet = FakeCluster.create(nodes=2, prefix="gw")
    node = fleet.node_name(1)
    fleet.kube.set_node_keep(node, {KEPT_FOR: "research"}, {}, [])  # kept after the run
    fleet.kube.patch_node(node, True, {})  # cordoned: Warden skips it (no Temporal here)
    gateway = Gateway(fleet.kube, None, "warden", None)
    server = gateway.serve("127.0.0.1:0")
    token = tmp_path / "token"
    token.write_text(fleet.issue_token("research"))
    monkeypatch.setattr("runner.commands.diagnose.interactive", lambda: True)
    case = case_named(tmp_path, "xid79-fell-off-bus", "tiny-lm", node)
    try:
        result = invoke(
            [
                "diagnose",
                "--analyze",
                "--local",
                str(case),
                "--approve",
                "--warden-url",
                f"http://127.0.0.1:{server.server_port}",
                "--warden-token-file",
                str(token),
            ],
            input="y\ny\n",
        )
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 0, result.stderr
    assert "Commit the relaunch tiny-lm-r1" in result.stdout
    assert f"Hand {node} to Warden for a node check?" in result.stdout
    assert f"skipped {{'{node}': 'cordoned'}}" in result.stdout
    assert gateway.counts[("/v1/nodechecks", 200)] == 1
    assert (
        "run/tiny-lm-r1"
        in subprocess.run(["git", "branch"], cwd=repo, capture_output=True, text=True).stdout
    )


def test_approve_commits_nothing_when_the_person_says_no(repo, tmp_path, monkeypatch):
    monkeypatch.setattr("runner.commands.diagnose.interactive", lambda: True)
    case = case_named(tmp_path, "xid79-fell-off-bus", "tiny-lm")
    result = invoke(["diagnose", "--analyze", "--local", str(case), "--approve"], input="n\nn\n")
    assert result.exit_code == 0, result.stderr
    assert (
        "relaunch not committed" in result.stdout and "nodes not handed to Warden" in result.stdout
    )
    assert (
        "run/"
        not in subprocess.run(["git", "branch"], cwd=repo, capture_output=True, text=True).stdout
    )
